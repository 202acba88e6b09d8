"""What a `ctsweep` command leaves on the terminal: its own lines, the progress display, and every
warning and error; the libraries' informational lines go to a log file instead.

The lines moved to `<root>/.ctsweep/logs/ctsweep-<command>.log` (appended; created at the first
line, so a command refused at once writes none; one header line per command run) are those a user cannot act on: Optuna's "A new study
created" (one per family and search repeat), Ray's note that token authentication is on (the
local cluster's default), MLflow's informational lines ("Validating input example ..."), and
Ray Tune's configuration box, experiment path and TensorBoard hint (Tune's legacy output engine
at verbose 0 prints none of them; the experiment path is logged here by the search instead).
MLflow's "Downloading artifacts" bars are switched off. Warnings and errors of every library
still reach the terminal, and all of it reaches the log.

A user's own settings win: an environment variable already set is left as it is, and a root
logger that already has handlers (ctsweep used as a library) is not touched.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import shlex
import sys
import time
from collections.abc import Iterator
from pathlib import Path

LOG_DIR = Path(".ctsweep") / "logs"
FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
# Lines of these loggers below the level given go to the log file only (their own handlers print
# them): Ray's note that token authentication is on is a warning about the local cluster's default.
# Tune's driver (ray.tune.tune) warns on every interrupted search to resume with
# `Tuner.restore(path=..., trainable=...)`: a ctsweep user resumes with `dvc repro` or the same
# command again, which restores the Tune run itself, so those lines go to the log only.
MOVED = {"mlflow": logging.WARNING, "ray._private.authentication.authentication_token_setup": logging.ERROR,
         "ray.tune.tune": logging.ERROR}
# Warnings no ctsweep user can act on, kept out of the terminal (the log has them): MLflow's note
# that a Python object is pickled, on every final model logged (pipeline.serving.pyfunc logs its
# wrapper object by design: models-from-code would have to import the project from a path).
NOT_ACTIONABLE = ("serialized using CloudPickle",)
ENVIRONMENT = {
    "RAY_AIR_NEW_OUTPUT": "0",  # Tune's legacy output: nothing at verbose=0 (ray/tune/experimental/output.py)
    "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR": "false",  # no "Downloading artifacts" bar per model logged
}


def log_path(root: Path, command: str) -> Path:
    return root / LOG_DIR / f"ctsweep-{command}.log"


def check_log_place(root: Path, command: str) -> None:
    """OutputError when a file stands where the log folder or its parent must be, or a folder
    where the command's log file must be: checked by the command before Ray, torch or MLflow load
    (the log file is created at its first line, which comes once the run has started: a
    `FileExistsError` traceback there, after every other check had passed)."""
    from pipeline.errors import OutputError

    folder = root / LOG_DIR
    for place in (folder.parent, folder):
        if place.exists() and not place.is_dir():
            raise OutputError(f"{place} is a file, not a folder: ctsweep keeps the log of `ctsweep {command}` in "
                              f"{folder}; move the file away, then run this again")
    path = log_path(root, command)
    if path.exists() and not path.is_file():
        raise OutputError(f"{path} is not a file: ctsweep appends the log of `ctsweep {command}` to it; move it "
                          f"away, then run this again")


class _CommandLog(logging.FileHandler):
    """The command's log file, created (with its folder and a header line naming the command) at
    its first line only: a command refused before anything ran leaves no file behind."""

    def _open(self):  # type: ignore[no-untyped-def]
        Path(self.baseFilename).parent.mkdir(parents=True, exist_ok=True)
        stream = super()._open()
        stream.write(f"{time.strftime('%Y-%m-%d %H:%M:%S')} ---- {shlex.join(sys.argv)} (pid {os.getpid()})\n")
        return stream


def _file_handler(path: Path) -> logging.Handler:
    handler = _CommandLog(path, delay=True, encoding="utf-8")
    handler.setFormatter(logging.Formatter(FORMAT))
    handler.setLevel(logging.INFO)
    return handler


def _terminal_handler() -> logging.Handler:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(name)s: %(levelname)s: %(message)s"))
    handler.setLevel(logging.WARNING)
    return handler


def quiet_libraries(root: Path, command: str) -> Path | None:
    """Route the libraries' informational lines of this process to the command's log file (see
    the module); returns the log's path, or None when the root logger was already configured."""
    for key, value in ENVIRONMENT.items():
        os.environ.setdefault(key, value)
    top = logging.getLogger()
    if top.handlers:
        return None
    path = log_path(root, command)
    to_file = _file_handler(path)  # a project it cannot write to: logging reports the error once and goes on
    top.addHandler(to_file)
    top.addHandler(_terminal_handler())
    top.setLevel(logging.INFO)
    _optuna_to_root()
    for name, level in MOVED.items():
        _moved(logging.getLogger(name), to_file, level)
    return path


class _NotActionable(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        return not any(text in message for text in NOT_ACTIONABLE)


def _optuna_to_root() -> None:
    import optuna

    optuna.logging.disable_default_handler()  # its stderr handler; its lines reach the root logger instead
    optuna.logging.enable_propagation()


def _moved(logger: logging.Logger, to_file: logging.Handler, terminal: int) -> None:
    """The logger's terminal handlers keep its lines from level `terminal` up, less the
    NOT_ACTIONABLE ones; all its lines go to the file."""
    if logger.name == "mlflow":
        import mlflow  # noqa: F401  (configures the mlflow logger's handler first; later imports keep it)
    if not logger.handlers:  # printed through a parent's handler: now through the file and one of its own
        logger.propagate = False
        logger.addHandler(_terminal_handler())
    for handler in logger.handlers:
        handler.setLevel(max(handler.level, terminal))
        handler.addFilter(_NotActionable())
    logger.addHandler(to_file)
    if logger.level == logging.NOTSET or logger.level > logging.INFO:
        logger.setLevel(logging.INFO)


class _ToLog(io.TextIOBase):
    """A text stream whose lines go to `logger` at INFO."""

    def __init__(self, logger: logging.Logger) -> None:
        self._logger, self._pending = logger, ""

    def write(self, text: str) -> int:
        *lines, self._pending = (self._pending + text).split("\n")
        for line in lines:
            if line.strip():
                self._logger.info(line)
        return len(text)

    def flush(self) -> None:
        if self._pending.strip():
            self._logger.info(self._pending)
        self._pending = ""


@contextlib.contextmanager
def printed_to_log(logger: logging.Logger) -> Iterator[None]:
    """Lines a library prints to stderr in the block (not logs: MLflow's `eprint`, which says
    "Registered model ... already exists" of a model this project registered itself) go to
    `logger` at INFO, so to the command's log file. Its exceptions still raise."""
    stream = _ToLog(logger)
    try:
        with contextlib.redirect_stderr(stream):
            yield
    finally:
        stream.flush()
