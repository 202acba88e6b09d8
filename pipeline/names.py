"""Names of datasets and families are identifiers, never paths.

A name becomes a folder (`data/processed/<dataset>`), a file (`results/<dataset>/search/<family>.json`),
an MLflow experiment and a registered model, so `.`, `..`, `''`, `a/b` or `/` must never reach
a path: `prepare ..` would replace all of `data/`. Every name is checked where it comes in
(params.yaml keys and lists, command-line arguments) before any path is built from it, and every
path a stage writes or removes is checked to lie inside the project (`inside`).
"""

from __future__ import annotations

import re
from pathlib import Path

from pipeline.errors import ConfigError

MAX_LENGTH = 64
# A letter first (so never `.`, `..`, `-x` read as an option, or empty), then letters, digits,
# `_` and `-`: portable as a file name on every filesystem, an MLflow experiment and a model name.
_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_-]*")
ALLOWED = (f"a letter followed by letters, digits, '_' or '-' (at most {MAX_LENGTH} characters), "
           "for example japanese_vowels_drop30")


def shown(value: object, limit: int = 40) -> str:
    """`repr(value)` cut to `limit` characters: an error echoes a short prefix of a bad value,
    never all of it (a value may be megabytes, or a YAML alias bomb)."""
    text = repr(value) if not isinstance(value, (dict, list, tuple, set)) else _container(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _container(value: object) -> str:
    # repr() of a deeply aliased YAML structure can take minutes: name the type and size only.
    return f"<{type(value).__name__} of {len(value)}>"  # type: ignore[arg-type]


def is_name(value: object) -> bool:
    """Whether `value` is a valid dataset or family name."""
    return isinstance(value, str) and len(value) <= MAX_LENGTH and _NAME.fullmatch(value) is not None


def check_name(value: object, what: str) -> str:
    """Return `value` if it is a valid name; else ConfigError naming `what` (for example
    "params.yaml: key `datasets`" or "argument DATASET") and the allowed characters."""
    if not is_name(value):
        raise ConfigError(f"{what}: {shown(value)} is not a valid name; allowed: {ALLOWED}")
    return value  # type: ignore[return-value]


def inside(path: Path, root: Path, what: str) -> Path:
    """`path` made absolute, if it lies strictly inside `root` (symbolic links resolved); else
    ConfigError. Called on every path a stage removes or replaces, as a second line of defence
    behind `check_name`."""
    resolved, base = Path(path).resolve(), Path(root).resolve()
    if resolved == base or not resolved.is_relative_to(base):
        raise ConfigError(f"{what}: {shown(str(path), 80)} lies outside {base}; refusing to write or remove it")
    return resolved
