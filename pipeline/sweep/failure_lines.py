"""One line per failed search trial on the terminal, naming the file that holds its traceback.

Ray Tune logs every failed trial's whole traceback (tune_controller's "Trial task failed for
trial ...") above the live table: with every trial failing, screens of the same traceback. The
search turns that off at its source, Tune's own switch `TUNE_PRINT_ALL_TRIAL_ERRORS=0` (a value
the user set is kept), and this callback prints instead, as each trial fails:

    ctsweep: search: japanese_vowels/cfc trial 3 failed: ValueError: ...; traceback: ray_results/.../error.txt

The traceback stays where Tune writes it (the trial's `error.txt` in the experiment folder), and
the trial's MLflow run keeps its reason; the family's record counts it (`n_failed`).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any, TextIO

from ray.tune import Callback

from pipeline.sweep.families import FAMILY_KEY, TRIAL_NUMBER_KEY

SWITCH = "TUNE_PRINT_ALL_TRIAL_ERRORS"  # read by Tune's controller when the search's fit starts


def quiet_tracebacks() -> None:
    """Tune prints no failed trial's traceback on the terminal (FailureLines says one line instead)."""
    os.environ.setdefault(SWITCH, "0")


def reason(error_file: str | None) -> str:
    """The exception line of a Tune error file (its last non-empty line), or 'unknown error'."""
    try:
        lines = [line.strip() for line in Path(error_file or "").read_text(errors="replace").splitlines()]
    except OSError:
        return "unknown error"
    lines = [line for line in lines if line]
    return lines[-1][:300] if lines else "unknown error"


def shown_path(path: str | None, root: Path) -> str:
    """`path` relative to the project root where it lies inside it, as a user would type it."""
    if not path:
        return "(no error file)"
    try:
        return str(Path(path).resolve().relative_to(root.resolve()))
    except ValueError:
        return path


class FailureLines(Callback):
    """Prints `ctsweep: <stage>: <family> trial <n> failed: <reason>; traceback: <file>` per failed trial."""

    def __init__(self, root: Path, stage: str = "search", stream: TextIO | None = None) -> None:
        self._root, self._stage, self._stream = root, stage, stream

    def on_trial_error(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        config = trial.config or {}
        number = config.get(TRIAL_NUMBER_KEY)
        name = f"{config.get(FAMILY_KEY, 'a')} trial {number if number is not None else trial.trial_id}"
        error_file = getattr(trial, "error_file", None)
        print(f"ctsweep: {self._stage}: {name} failed: {reason(error_file)}; traceback: "
              f"{shown_path(error_file, self._root)}", file=self._stream or sys.stderr, flush=True)

    def __getstate__(self) -> dict[str, Any]:  # Tune pickles the run config with its experiment state
        return {"_root": self._root, "_stage": self._stage, "_stream": None}
