"""The built-in families' constructor arguments, read without importing torch or a model.

A search space names model arguments (`hidden_size: {distribution: int, ...}`), and loading it
checks every key and value against the family's constructor (`model_arguments`, which follows
**kwargs up the class hierarchy). Doing that on the classes themselves costs `import torch` and
every lineage (2-4 s on a 2-core machine) before a command can say that a key is misspelt. So the
package ships the same facts as a table, signatures.json beside this file, written by

    python -m pipeline.models.signatures            # rewrite the table from the zoo

and tests/test_startup.py fails when the table and the classes disagree (a new argument, a
changed default), naming the command above. User families are not in the table: their classes
are imported (they are the user's code, checked by `ctsweep check-family`).

Per family the table keeps the class name, `representation` and `input_arguments` (what
precompute and the embedding check read) and each keyword argument's kind, default (absent: no
default) and annotation as written (every zoo module uses `from __future__ import annotations`,
so annotations are strings).
"""

from __future__ import annotations

import inspect
import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

TABLE = Path(__file__).with_name("signatures.json")
REWRITE = "python -m pipeline.models.signatures"


@dataclass(frozen=True)
class Signature:
    """What a space check needs of a built-in family's class, without the class."""

    class_name: str
    representation: str
    input_arguments: tuple[str, ...]
    arguments: dict[str, inspect.Parameter]  # every keyword argument, as model_arguments gives it


def _parameter(name: str, entry: dict[str, Any]) -> inspect.Parameter:
    default = entry["default"] if "default" in entry else inspect.Parameter.empty
    return inspect.Parameter(name, getattr(inspect.Parameter, entry["kind"]), default=default, annotation=entry["annotation"])


@lru_cache(maxsize=1)
def _table() -> dict[str, Any]:
    return json.loads(TABLE.read_text())


def signature(family: str) -> Signature | None:
    """The table's entry for built-in `family`; None for any other name."""
    entry = _table().get(family)
    if entry is None:
        return None
    return Signature(entry["class"], entry["representation"], tuple(entry["input_arguments"]),
                     {name: _parameter(name, e) for name, e in entry["arguments"].items()})


def live_table() -> dict[str, Any]:
    """The table as the zoo's classes give it now (imports torch and every lineage)."""
    from pipeline.models.base import model_arguments
    from pipeline.models.zoo import MODELS

    table: dict[str, Any] = {}
    for family, cls in MODELS.items():
        arguments: dict[str, Any] = {}
        for name, p in model_arguments(cls).items():
            annotation = p.annotation if isinstance(p.annotation, str) else getattr(p.annotation, "__name__", str(p.annotation))
            entry: dict[str, Any] = {"kind": p.kind.name, "annotation": annotation}
            if p.default is not p.empty:
                json.dumps(p.default)  # a default the table cannot hold fails here, when the table is written
                entry["default"] = p.default
            arguments[name] = entry
        table[family] = {"class": cls.__name__, "representation": cls.representation,
                         "input_arguments": list(cls.input_arguments), "arguments": arguments}
    return table


def main() -> None:
    TABLE.write_text(json.dumps(live_table(), indent=1) + "\n")  # the zoo's order, each signature's order
    print(f"wrote {TABLE}")


if __name__ == "__main__":
    main()
