"""A command-line option given a value of the wrong type or range: one line, like every other
refusal, instead of Typer's usage box (usage, a hint and a framed error: six lines or more).

Typer raises BadParameter while it parses a command's arguments, before the command runs; the
group below catches it around every subcommand (the `postgres` group's too, as it runs inside)
and says which option, what was wrong and what is allowed, then exits with status 2 as Typer
does. Other usage errors (a missing argument, an unknown option) keep Typer's box: it shows the
usage a user then needs.
"""

from __future__ import annotations

from typing import Any

import typer
from typer.core import TyperGroup

_KINDS = {int: "a whole number", float: "a number", bool: "true or false", str: "a text"}


def allowed(param: Any) -> str:
    """What an option takes, in words: its type and range (Typer's `min`/`max`)."""
    descriptor = getattr(param, "type_descriptor", None)
    annotation = getattr(descriptor, "annotation", None)
    what = _KINDS.get(annotation, getattr(annotation, "__name__", "a value"))
    info = getattr(descriptor, "parameter_info", None)
    low, high = getattr(info, "min", None), getattr(info, "max", None)
    if low is not None and high is not None:
        return f"{what} from {low} to {high}"
    if low is not None:
        return f"{what} of at least {low}"
    return f"{what} of at most {high}" if high is not None else what


def one_line(error: typer.BadParameter, command: str) -> str:
    """`ctsweep: error: option --x of <command>: <Typer's reason>; allowed: <what the option takes>`."""
    param = error.param
    hint = param.get_error_hint().replace("'", "") if param is not None else "a value"
    reason = " ".join(error.message.split()).rstrip(".")
    where = f" of ctsweep {command}" if command else ""
    what = f"; allowed: {allowed(param)}" if param is not None else ""
    return f"ctsweep: error: option {hint}{where}: {reason}{what}"


class OneLineGroup(TyperGroup):
    """The application's group: a BadParameter of any subcommand is one line and exit status 2."""

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except typer.BadParameter as error:
            path = error.ctx.command_path if error.ctx is not None else ""
            command = path.removeprefix(ctx.command_path).strip()
            typer.echo(one_line(error, command), err=True)
            raise typer.Exit(2) from None
