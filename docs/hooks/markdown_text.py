"""Plain text from the code (help strings, field descriptions, values) written into generated
Markdown so that it renders as written: the reference pages quote the code, they never let a
description's `{...}`, `<root>` or `**/*.json` turn into attributes, HTML or emphasis."""

from __future__ import annotations

import re

__all__ = ["code", "inline", "paragraphs", "table"]

_CODE_SPAN = re.compile(r"(`+)(.+?)\1", re.DOTALL)
# Markdown's own escapes; `{`/`}`: attr_list would read a trailing `{a: 1}` as attributes; `|`: a table cell.
_ESCAPED = str.maketrans({c: "\\" + c for c in "\\*_[]{}|#`"} | {"<": "&lt;", ">": "&gt;", "&": "&amp;"})


def _escape(text: str) -> str:
    return text.translate(_ESCAPED)


def inline(text: str) -> str:
    """`text` on one line (a table cell), code spans kept as code and everything else literal."""
    text = " ".join(text.split())
    out, end = [], 0
    for match in _CODE_SPAN.finditer(text):
        out.append(_escape(text[end:match.start()]))
        out.append(code(match.group(2).strip()))
        end = match.end()
    out.append(_escape(text[end:]))
    return "".join(out)


def paragraphs(text: str) -> str:
    """`text`'s paragraphs (blank-line separated, hard-wrapped lines joined), each made `inline`."""
    blocks = re.split(r"\n\s*\n", text.strip())
    return "\n\n".join(inline(block) for block in blocks if block.strip())


def code(text: str) -> str:
    """`text` as one code span, whatever backticks it holds (CommonMark's longer fence rule)."""
    text = " ".join(str(text).split())
    fence = "`" * (max((len(run) for run in re.findall(r"`+", text)), default=0) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def table(header: list[str], rows: list[list[str]]) -> str:
    """A Markdown table of cells that are already Markdown (made with `inline` or `code`)."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell or " " for cell in row) + " |" for row in rows]
    return "\n".join(lines)
