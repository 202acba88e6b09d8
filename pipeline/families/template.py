"""`ctsweep new-family NAME`: a commented model, its search space and its test, which pass
`ctsweep check-family NAME` as written, and the params.yaml line that declares the family.

Files written (none is ever overwritten):
    my_families/__init__.py, my_families/<name>.py   the model, importable from the project root
    search_spaces/<name>.yaml                         its search space
    tests/test_family_<name>.py                       pytest: the model contract (pipeline/families/check.py)
and params.yaml gains `user_families: {<name>: my_families.<name>:<Class>}` (its text is kept;
the entry is added under an existing `user_families:` or at the end).
"""

from __future__ import annotations

from pathlib import Path

import yaml

from pipeline.config import read_yaml
from pipeline.errors import ConfigError
from pipeline.stores.files import write_text
from pipeline.names import check_name

PACKAGE = "my_families"

MODEL = '''"""{cls}: a GRU whose state decays between irregular observations.

Between observations the state follows the linear ODE dh/dt = -h / tau (one rate per unit), whose
exact solution h(t + dt) = h(t) exp(-dt / tau) needs no solver; at an observation a GRU cell
reads the values. Replace the body with your own model: ctsweep only needs the contract below.

Contract (pipeline/models/base.py, checked by `ctsweep check-family {name}`):
  * keyword arguments with defaults are what the search space may set (search_spaces/{name}.yaml);
    input_channels, output_size and per_step are supplied by ctsweep;
  * representation "raw": forward receives x (B, L, C) with missing values as 0, dt (B, L) the
    time since the previous observation and mask (B, L), True at observed steps (padding is at the
    end); "interp" families build their own inputs in the classmethod `prepare_inputs`;
  * return (B, output_size), read at each series' last observation, or (B, L, output_size) with
    per_step=True; padding must not change any output of a shorter series.
"""

import torch
from torch import nn

from pipeline.models.base import SequenceModel


class {cls}(SequenceModel):
    representation = "raw"

    def __init__(self, *, input_channels: int, output_size: int, per_step: bool = False,
                 hidden_size: int = 32) -> None:
        super().__init__(input_channels=input_channels, output_size=output_size, per_step=per_step)
        self.cell = nn.GRUCell(input_channels, hidden_size)
        self.log_rate = nn.Parameter(torch.zeros(hidden_size))  # 1 / tau = exp(log_rate)
        self.head = nn.Linear(hidden_size, output_size)

    def forward(self, x: torch.Tensor, dt: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        h = x.new_zeros(x.shape[0], self.cell.hidden_size)
        outputs = []
        for i in range(x.shape[1]):
            decayed = h * torch.exp(-dt[:, i, None] * self.log_rate.exp())
            # Padding keeps the state: a shorter series ends with the state of its last observation.
            h = torch.where(mask[:, i, None], self.cell(x[:, i], decayed), h)
            outputs.append(h)
        if self.per_step:
            return self.head(torch.stack(outputs, dim=1))  # (B, L, output_size)
        return self.head(h)  # (B, output_size)
'''

SPACE = '''# Search space of {name} ({PACKAGE}/{name}.py). Every key is a training setting (lr, batch_size,
# optimizer, ...: pipeline/config/protocol.py) or a keyword argument of the model; `reference` is tried
# first. Format: pipeline/spaces/__init__.py.
reference:
  lr: 0.005
  hidden_size: 32
params:
  lr: {{distribution: loguniform, low: 1.0e-4, high: 3.0e-2}}
  hidden_size: {{distribution: int, low: 16, high: 128, step: 16}}
fixed:
  batch_size: 32
'''

TEST = '''"""{name} passes ctsweep's model contract (`ctsweep check-family {name}` runs the same checks)."""

from pathlib import Path

from pipeline.config import load_params
from pipeline.families.check import check_family

ROOT = Path(__file__).resolve().parents[1]


def test_{module}_passes_the_model_contract() -> None:
    load_params(ROOT / "params.yaml")  # declares the families of `user_families`
    failed = [check.line() for check in check_family(ROOT, "{name}") if not check.passed]
    assert not failed, failed
'''


def class_name(name: str) -> str:
    """my_gru -> MyGru (a family name may hold '-', a class name may not)."""
    return "".join(part[:1].upper() + part[1:] for part in name.replace("-", "_").split("_") if part)


def new_family(root: Path, name: str) -> list[Path]:
    """Write the template files of family `name` under `root` and declare it; returns what was written.

    ConfigError, before anything is written, when a file exists already, the name is a built-in
    family, or params.yaml declares the name already.
    """
    from pipeline.models import MODELS

    check_name(name, "argument NAME")
    module = name.replace("-", "_")
    if name in MODELS:
        raise ConfigError(f"{name!r} is a built-in family; allowed: a name that is not one of ctsweep's own families")
    params_path = root / "params.yaml"
    declared = (read_yaml(params_path) or {}).get("user_families") or {} if params_path.is_file() else {}
    if name in declared:
        raise ConfigError(f"{params_path}: `user_families.{name}` exists already; allowed: a new name")
    files = {
        root / PACKAGE / "__init__.py": '"""Model families of this project (ctsweep new-family)."""\n',
        root / PACKAGE / f"{module}.py": MODEL.format(cls=class_name(name), name=name),
        root / "search_spaces" / f"{name}.yaml": SPACE.format(name=name, PACKAGE=PACKAGE),
        root / "tests" / f"test_family_{module}.py": TEST.format(name=name, module=module),
    }
    existing = [p for p in files if p.exists() and p.name != "__init__.py"]
    if existing:
        raise ConfigError(f"{existing[0]} exists already; new-family never overwrites a file")
    written = []
    for path, text in files.items():
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            write_text(path, text)
            written.append(path)
    if params_path.is_file():
        declare(params_path, name, f"{PACKAGE}.{module}:{class_name(name)}")
        written.append(params_path)
    if (root / "dvc.yaml").is_file() and depend_on_package(root / "dvc.yaml"):
        written.append(root / "dvc.yaml")
    return written


# The stages that build models: DVC reruns them when a file under my_families/ changes (as it
# does for pipeline/models), and ctsweep then redoes only the families whose code changed.
MODEL_STAGES = ("search", "final")


def depend_on_package(dvc_path: Path) -> bool:
    """Add my_families/ to the deps of dvc.yaml's search and final stages (text kept otherwise);
    False when it is there already or the file is not laid out as ctsweep's own (then the
    `new-family` output says what to add)."""
    lines = dvc_path.read_text().splitlines(keepends=True)
    stage, added = None, 0
    for i, line in enumerate(list(lines)):
        if line.startswith("  ") and not line.startswith("   ") and line.strip().endswith(":"):
            stage = line.strip()[:-1]
        if stage in MODEL_STAGES and line.strip() == "deps:":
            indent = " " * (len(line) - len(line.lstrip()) + 2)
            lines.insert(i + 1 + added, f"{indent}- {PACKAGE}   # this project's own families (ctsweep new-family)\n")
            added += 1
    text = "".join(lines)
    try:
        stages = (yaml.safe_load(text) or {}).get("stages", {})
        ok = added == len(MODEL_STAGES) and all(PACKAGE in stages[s]["do"]["deps"] for s in MODEL_STAGES)
    except (yaml.YAMLError, KeyError, TypeError, AttributeError):
        ok = False
    before = (yaml.safe_load(dvc_path.read_text()) or {}).get("stages", {})
    present = all(PACKAGE in (before.get(s, {}).get("do", {}).get("deps") or []) for s in MODEL_STAGES)
    if present or not ok:
        return False
    write_text(dvc_path, text)
    return True


def declare(params_path: Path, name: str, target: str) -> None:
    """Add `name: target` under params.yaml's `user_families` (kept as it is otherwise)."""
    lines = params_path.read_text().splitlines(keepends=True)
    entry = f"  {name}: {target}\n"
    header = next((i for i, line in enumerate(lines) if line.startswith("user_families:")), None)
    if header is None:
        text = "".join(lines) + ("" if not lines or lines[-1].endswith("\n") else "\n")
        text += f"\n# Families of this project's own code (docs/how-to/own-model.md).\nuser_families:\n{entry}"
    elif lines[header].split("#")[0].strip() in ("user_families:", "user_families: {}"):
        lines[header] = "user_families:\n"
        lines.insert(header + 1, entry)
        text = "".join(lines)
    else:
        raise ConfigError(f"{params_path}: `user_families` is written inline; add `{name}: {target}` to it yourself")
    try:  # checked before it replaces the file: a params.yaml this edit would break stays as it was
        added = (yaml.safe_load(text) or {}).get("user_families", {}).get(name)
    except yaml.YAMLError:
        added = None
    if added != target:
        raise ConfigError(f"{params_path}: could not add `user_families.{name}`; add `{name}: {target}` yourself")
    write_text(params_path, text)
