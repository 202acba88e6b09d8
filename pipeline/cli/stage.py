"""What every `ctsweep` command shares: the --root option, and the wrapper that turns a
CtsweepError into one line and exit status 2, and a signal into a clean stop."""

from __future__ import annotations

import functools
from typing import Any, Callable

import typer

from pipeline.errors import CtsweepError
from pipeline.runtime.interrupts import Interrupted, handle_signals, stop_message

__all__ = ["ROOT", "stage"]

ROOT = typer.Option(None, "--root", help="Project root holding params.yaml (default: working directory).")


def stage(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Turn a CtsweepError into one line on stderr and exit status 2, without a traceback; and
    SIGINT / SIGTERM into a clean stop with exit status 128 + the signal (130, 143)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            with handle_signals():
                return fn(*args, **kwargs)
        except CtsweepError as exc:
            typer.echo(f"ctsweep: error: {exc}", err=True)
            raise typer.Exit(2) from None
        except (Interrupted, KeyboardInterrupt) as exc:
            stop = exc if isinstance(exc, Interrupted) else Interrupted(2)
            typer.echo(f"ctsweep: {stop_message(stop)}", err=True)  # what it had written, if anything
            raise typer.Exit(stop.exit_code) from None

    return wrapper
