"""The `ctsweep` command-line reference, written from the Typer app itself (the click command
tree Typer builds, and each parameter's own help, type and default), so it cannot drift from
what `ctsweep COMMAND --help` prints.

Anchors (for links from other pages): a command's id is its words joined by `-`:
`#ctsweep`, `#ctsweep-search`, `#ctsweep-postgres-start`.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from typing import Any

import typer

from markdown_text import code, inline, paragraphs, table

__all__ = ["anchor", "cli_markdown", "commands"]

PROGRAM = "ctsweep"  # pyproject.toml [project.scripts]


def anchor(path: list[str]) -> str:
    """The anchor id of the command `path` (`["ctsweep", "postgres", "start"]`)."""
    return "-".join(path)


def commands(command: Any | None = None, path: list[str] | None = None,
             parent: typer.Context | None = None) -> Iterator[tuple[list[str], Any, typer.Context]]:
    """Every visible command of the tree under `command` (the whole `ctsweep` app by default),
    depth first in the order `--help` lists them, with its word path and click context."""
    if command is None:
        from pipeline.cli import app

        command = typer.main.get_command(app)
    path = path or [PROGRAM]
    ctx = typer.Context(command, info_name=path[-1], parent=parent)
    yield path, command, ctx
    if hasattr(command, "list_commands"):  # a group: its subcommands, hidden ones left out as --help does
        for name in command.list_commands(ctx):
            sub = command.get_command(ctx, name)
            if sub is not None and not getattr(sub, "hidden", False):
                yield from commands(sub, path + [name], ctx)


def _help(command: Any) -> str:
    # click's conventions: text after \f is for the code only; \b marks a paragraph not to rewrap
    text = inspect.cleandoc((command.help or "").split("\f")[0]).replace("\b\n", "")
    return paragraphs(text)


def _type(param: Any, ctx: typer.Context) -> str:
    """The value type as `--help` shows it (Typer's own `display_type`), with a numeric range."""
    shown = param.display_type(ctx) if hasattr(param, "display_type") else param.type.name
    shown = str(shown).strip("<>")
    low, high = getattr(param, "min", None), getattr(param, "max", None)
    if low is not None or high is not None:  # Typer's "float range": the range itself instead
        bounds = (f"{low} ≤ x ≤ {high}" if low is not None and high is not None
                  else f"x ≥ {low}" if low is not None else f"x ≤ {high}")
        shown = f"{shown.removesuffix(' range')} ({bounds})"
    if getattr(param, "multiple", False):
        shown += ", repeatable"
    return code(shown)


def _default(param: Any, ctx: typer.Context) -> str:
    if param.required:
        return "*required*"
    value = param.get_default(ctx, call=False)
    if callable(value):
        return "*computed*"
    if getattr(param, "is_flag", False) and not getattr(param, "secondary_opts", None):
        return "off" if not value else "on"
    return "—" if value is None else code(str(value))


def _description(param: Any) -> str:
    text = inline(getattr(param, "help", None) or "")
    envvar = param.envvar
    if envvar:
        names = [envvar] if isinstance(envvar, str) else list(envvar)
        text += (" " if text else "") + "Environment variable: " + ", ".join(code(n) for n in names) + "."
    return text


def _command_markdown(path: list[str], command: Any, ctx: typer.Context) -> str:
    level = min(2 + max(len(path) - 2, 0), 4)  # ctsweep and its commands h2, a group's commands h3
    parts = [f"{'#' * level} {code(' '.join(path))} {{#{anchor(path)}}}"]
    if getattr(command, "deprecated", False):
        parts.append("*Deprecated.*")
    if help_text := _help(command):
        parts.append(help_text)
    parts.append(f"```text\n{command.get_usage(ctx)}\n```")
    params = [p for p in command.params if not getattr(p, "hidden", False)]
    arguments = [p for p in params if p.param_type_name == "argument"]
    options = [p for p in params if p.param_type_name == "option"]
    if arguments:
        parts.append("**Arguments**")
        parts.append(table(["Argument", "Type", "Default", "Description"],
                           [[code(p.metavar or p.name), _type(p, ctx), _default(p, ctx), _description(p)]
                            for p in arguments]))
    if options:
        parts.append("**Options**")
        parts.append(table(["Option", "Type", "Default", "Description"],
                           [[", ".join(code(o) for o in p.opts + p.secondary_opts),
                             "flag" if getattr(p, "is_flag", False) else _type(p, ctx),
                             _default(p, ctx), _description(p)] for p in options]))
    if hasattr(command, "list_commands"):
        rows = []
        for name in command.list_commands(ctx):
            sub = command.get_command(ctx, name)
            if sub is not None and not getattr(sub, "hidden", False):
                rows.append([f"[{code(' '.join(path + [name]))}](#{anchor(path + [name])})",
                             inline(sub.get_short_help_str(limit=200))])
        parts.append("**Commands**")
        parts.append(table(["Command", "What it does"], rows))
    return "\n\n".join(parts)


INTRO = f"""\
# Command-line reference

Every `{PROGRAM}` command with its arguments and options, written from the command-line program
itself each time this site is built: `{PROGRAM} COMMAND --help` prints the same. Every command
also takes `--help`.
"""


def cli_markdown() -> str:
    """The command-line reference page: every command and subcommand of the `ctsweep` app."""
    return INTRO + "\n" + "\n\n".join(_command_markdown(*entry) for entry in commands()) + "\n"
