"""The params.yaml reference, written from the pydantic models that load params.yaml
(pipeline/config/) and from the repository's params.yaml, so it cannot drift from either.

Each key shows two values that are easy to confuse: the default in the code (what a key left out
of params.yaml gets) and the value the repository's params.yaml ships. A key under a mapping keyed
by your own names (`prepare`'s datasets, `family_resources`' families) is written with a
placeholder, `prepare.<dataset>.n_train`.

Anchors (for links from other pages): every key's id is its dotted path, a placeholder written
without its brackets (`search.family_resources.family.cpu`, `final.cells.cell.epochs`) and, where
the value is one of several models picked by a tag (`prepare.<dataset>`'s `kind`), the tag after
it: `prepare.dataset.xor.n_train`. A list of sections adds nothing
(`prepare.dataset.uea.precompute.family`).
"""

from __future__ import annotations

import inspect
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal, Union, get_args, get_origin

import yaml
from pydantic import BaseModel
from pydantic.fields import FieldInfo

from markdown_text import code, inline, paragraphs, table

__all__ = ["PLACEHOLDERS", "Model", "anchor_segment", "params_markdown", "union_members"]

ROOT = Path(__file__).resolve().parents[2]

# What the keys of a mapping field name, by the field's name: (placeholder, its anchor segment).
# Nested mappings (`fixed`: family, then argument) list one pair per level. A mapping field not
# listed here is written `<key>`.
PLACEHOLDERS: dict[str, tuple[tuple[str, str], ...]] = {
    "prepare": (("<dataset>", "dataset"),),
    "family_resources": (("<family>", "family"),),
    "family_time_limit_s": (("<family>", "family"),),
    "family_epochs": (("<family>", "family"),),
    "fixed": (("<family>", "family"), ("<argument>", "argument")),
    "user_families": (("<family>", "family"),),
    "cells": (("<dataset>/<family>", "cell"),),
    "args": (("<argument>", "argument"),),
}
_OTHER = ("<key>", "key")

Model = type[BaseModel]


def anchor_segment(field_name: str, level: int = 0) -> str:
    """The anchor segment of level `level` of the keys of mapping field `field_name`."""
    levels = PLACEHOLDERS.get(field_name, ())
    return levels[level][1] if level < len(levels) else _OTHER[1]


def _placeholder(field_name: str, level: int = 0) -> str:
    levels = PLACEHOLDERS.get(field_name, ())
    return levels[level][0] if level < len(levels) else _OTHER[0]


def union_members(annotation: Any) -> list[tuple[str, Model]] | None:
    """The models a section may be, with the tag that picks each (`kind: xor`): one untagged pair
    for a plain model, None when `annotation` is no model at all."""
    discriminator = None
    if get_origin(annotation) is Annotated:
        annotation, *meta = get_args(annotation)
        discriminator = next((m.discriminator for m in meta if isinstance(m, FieldInfo) and m.discriminator), None)
    if inspect.isclass(annotation) and issubclass(annotation, BaseModel):
        return [("", annotation)]
    if get_origin(annotation) in (Union, types.UnionType):
        members = get_args(annotation)
        if members and all(inspect.isclass(m) and issubclass(m, BaseModel) for m in members):
            if discriminator is None:
                return [(m.__name__, m) for m in members]
            return [(str(get_args(m.model_fields[discriminator].annotation)[0]), m) for m in members]
    return None


def _section_shape(annotation: Any) -> tuple[str, Any] | None:
    """("model" | "mapping" | "list", the item annotation) for a field holding sections, else None."""
    if union_members(annotation) is not None:
        return "model", annotation
    origin, args = get_origin(annotation), get_args(annotation)
    if origin is dict and union_members(args[1]) is not None:
        return "mapping", args[1]
    if origin is list and union_members(args[0]) is not None:
        return "list", args[0]
    return None


# --- values, types and bounds as params.yaml writes them ---

def _yaml(value: Any) -> str:
    """`value` as one line of YAML flow style (`null`, `true`, `[0, 1]`, `{}`)."""
    text = yaml.safe_dump(value, default_flow_style=True, width=float("inf"), sort_keys=False).strip()
    return text.removesuffix("...").strip()


def _bounds(metadata: list[Any], unit: str = "items") -> str:
    """The numeric and length bounds of a field or type (pydantic's Field(ge=..., max_length=...)),
    lengths counted in `unit`."""
    found: dict[str, Any] = {}
    for item in metadata:
        for inner in item.metadata if isinstance(item, FieldInfo) else [item]:
            for name in ("ge", "gt", "le", "lt", "min_length", "max_length"):
                if getattr(inner, name, None) is not None:
                    found[name] = getattr(inner, name)
    parts = []
    lower = next(((op, found[k]) for k, op in (("ge", "≤"), ("gt", "<")) if k in found), None)
    upper = next(((op, found[k]) for k, op in (("le", "≤"), ("lt", "<")) if k in found), None)
    if lower and upper:
        parts.append(f"{lower[1]} {lower[0]} x {upper[0]} {upper[1]}")
    elif lower:  # one bound reads better with x first: x ≥ 0
        parts.append(f"x {'≥' if lower[0] == '≤' else '>'} {lower[1]}")
    elif upper:
        parts.append(f"x {upper[0]} {upper[1]}")
    if "min_length" in found and "max_length" in found:
        parts.append(f"{found['min_length']} to {found['max_length']} {unit}")
    elif "max_length" in found:
        parts.append(f"at most {found['max_length']} {unit}")
    elif "min_length" in found:
        parts.append("not empty" if found["min_length"] == 1 else f"at least {found['min_length']} {unit}")
    return ", ".join(parts)


def _type(annotation: Any, field_name: str = "", level: int = 0) -> str:
    """A type as the YAML it takes: `int`, `float | null`, `list[int (0 ≤ x ≤ 9)]`, `{<family>: float}`."""
    from pipeline.config.base import Name

    if annotation == Name:
        return "name"
    if (members := union_members(annotation)) is not None:
        tags = [tag or member.__name__ for tag, member in members]
        return "section" if tags == [members[0][1].__name__] else f"section ({' | '.join(tags)})"
    origin, args = get_origin(annotation), get_args(annotation)
    if origin is Annotated:
        bounds = _bounds(list(args[1:]))
        inner = _type(args[0], field_name, level)
        return f"{inner} ({bounds})" if bounds else inner
    if annotation is type(None):
        return "null"
    if annotation is Any:
        return "any"
    if origin in (Union, types.UnionType):
        return " | ".join(_type(a, field_name, level) for a in args)
    if origin is Literal:
        return " | ".join(_yaml(a) for a in args)
    if origin is list:
        return f"list[{_type(args[0], field_name, level)}]"
    if origin is dict:
        return f"{{{_placeholder(field_name, level)}: {_type(args[1], field_name, level + 1)}}}"
    return getattr(annotation, "__name__", str(annotation))


def _field_type(info: FieldInfo, name: str) -> str:
    from pipeline.config.base import Name

    bounds = _bounds(info.metadata, "characters" if info.annotation is str else "items")
    # pydantic moves a field's own Annotated metadata (Name's validator) off its annotation
    shown = "name" if info.annotation is str and get_args(Name)[1] in info.metadata else _type(info.annotation, name)
    return f"{shown} ({bounds})" if bounds else shown


def _default(info: FieldInfo) -> str:
    """The code's default as YAML, or *required*."""
    if info.is_required():
        return "*required*"
    value = info.get_default(call_default_factory=True, validated_data={})
    if isinstance(value, BaseModel):
        return "*section*"
    return code(_yaml(value))


# --- the values params.yaml ships ---

_MISSING = object()


@dataclass
class _Shipped:
    """What params.yaml holds at one level of the schema: a node per concrete path (`[("", node)]`
    at the top; one per dataset under `prepare.<dataset>`), labelled for the reader."""

    nodes: list[tuple[str, Any]]

    @property
    def concrete(self) -> bool:
        """Whether these nodes are one concrete path (no placeholder above them)."""
        return len(self.nodes) == 1 and not self.nodes[0][0]

    def _grouped(self, key: str, shown: Any) -> str:
        if not self.nodes:
            return "no entries"
        groups: dict[str, list[str]] = {}
        unset = []
        for label, node in self.nodes:
            value = node.get(key, _MISSING) if isinstance(node, dict) else _MISSING
            if value is _MISSING:
                unset.append(label)
            else:
                groups.setdefault(shown(value), []).append(label)
        if self.concrete:
            return next(iter(groups)) if groups else "not set"
        parts = [f"{text} ({', '.join(labels)})" for text, labels in groups.items()]
        if unset:
            parts.append(f"not set ({', '.join(unset)})")
        return "; ".join(parts)

    def value(self, key: str) -> str:
        """The value(s) params.yaml sets for `key` under these nodes, grouped by value."""
        return self._grouped(key, lambda value: code(_yaml(value)))

    def summary(self, key: str) -> str:
        """What params.yaml holds under `key` when it holds sections: their names, or how many."""
        def shown(value: Any) -> str:
            if isinstance(value, dict) and value:
                return ", ".join(code(str(k)) for k in value)
            if isinstance(value, list) and value:
                return f"{len(value)} {'entry' if len(value) == 1 else 'entries'}"
            return code(_yaml(value))
        return self._grouped(key, shown)

    def below(self, key: str, shape: str, tag: str = "", tag_key: str = "kind") -> "_Shipped":
        """The nodes one level down: the mapping's entries (only those of `tag` under a tagged
        union), the list's items, or the section itself."""
        out = []
        for label, node in self.nodes:
            child = node.get(key) if isinstance(node, dict) else None
            if shape == "model":  # a section left out is one whose keys are all not set
                out.append((label, child if isinstance(child, dict) else {}))
            elif shape == "mapping" and isinstance(child, dict):
                out += [(f"{label}.{k}" if label else str(k), v) for k, v in child.items()
                        if not tag or isinstance(v, dict) and v.get(tag_key) == tag]
            elif shape == "list" and isinstance(child, list):
                out += [(f"{label or key}[{i}]", v) for i, v in enumerate(child)]
        return _Shipped(out)


# --- the page ---

@dataclass
class _Section:
    level: int
    title: str
    anchor: str
    intro: list[str] = field(default_factory=list)
    rows: list[list[str]] = field(default_factory=list)

    def markdown(self) -> str:
        parts = [f"{'#' * self.level} {self.title} {{#{self.anchor}}}", *(text for text in self.intro if text)]
        if self.rows:
            parts.append(table(["Key", "Type", "Default in the code", "In params.yaml", "Description"], self.rows))
        return "\n\n".join(parts)


def _key_cell(display: list[str], anchor: str) -> str:
    return f"[{code('.'.join(display))}](#{anchor}){{#{anchor}}}"


def _description(info: FieldInfo | None, model: Model | None = None) -> str:
    texts = [info.description] if info is not None and info.description else []
    if model is not None and model.__doc__ and model.__doc__ != BaseModel.__doc__:
        texts.append(inspect.cleandoc(model.__doc__))
    return "\n\n".join(paragraphs(t) for t in texts)


def _walk(model: Model, display: list[str], anchor: list[str], shipped: _Shipped, level: int,
          section: _Section, out: list[_Section]) -> None:
    """Rows of `model`'s plain keys into `section`; a section of its own (appended to `out`,
    after `section`) for every key that holds sections."""
    nested: list[tuple[str, FieldInfo, tuple[str, Any]]] = []
    for name, info in model.model_fields.items():
        shape = _section_shape(info.annotation)
        if shape is not None:
            nested.append((name, info, shape))
            continue
        section.rows.append([_key_cell(display + [name], ".".join(anchor + [name])), code(_field_type(info, name)),
                             _default(info), shipped.value(name), inline(info.description or "")])
    for name, info, (shape, item) in nested:
        members = union_members(item) or []
        tagged = len(members) > 1
        path, ids = display + [name], anchor + [name]
        if shape == "mapping":
            path, ids = path + [_placeholder(name)], ids + [anchor_segment(name)]
        elif shape == "list":
            path = path[:-1] + [f"{name}[]"]
        own = _Section(min(level, 4), code(".".join(display + [name])), ".".join(anchor + [name]))
        own.intro.append(_description(info, None if tagged else members[0][1]))
        if shape != "model":
            own.intro.append(f"Type: {code(_field_type(info, name))}. Default in the code: {_default(info)}. "
                             f"In params.yaml: {shipped.summary(name)}.")
        out.append(own)
        for tag, member in members:
            below = shipped.below(name, shape, tag if tagged else "", _tag_key(item))
            if not tagged:
                _walk(member, path, ids, below, level + 1, own, out)
                continue
            sub = _Section(min(level + 1, 4), f"{code('.'.join(path))} of {_tag_key(item)} {code(tag)}",
                           ".".join(ids + [tag]), [_description(None, member)])
            names = [label for label, _ in below.nodes]
            sub.intro.append(f"In params.yaml: {', '.join(names)}." if names else "None in params.yaml.")
            out.append(sub)
            _walk(member, path, ids + [tag], below, level + 2, sub, out)


def _tag_key(annotation: Any) -> str:
    if get_origin(annotation) is Annotated:
        for meta in get_args(annotation)[1:]:
            if isinstance(meta, FieldInfo) and isinstance(meta.discriminator, str):
                return meta.discriminator
    return "kind"


INTRO = """\
# params.yaml reference

Every key params.yaml may set, written from the code that reads it each time this site is built.
Two values are easy to confuse and both are shown: the **default in the code** is what a key gets
when params.yaml leaves it out; **in params.yaml** is what the repository's params.yaml sets.
A key set nowhere gets the default; a key marked *required* must be set.

A key under a mapping of your own names is written with a placeholder: `prepare.<dataset>.n_train`
is `n_train` of any dataset under `prepare`. `name` is {names}. Unknown keys and values of the
wrong type are refused when params.yaml is loaded, with the file and the key named.
"""


def params_markdown(params_yaml: Path | None = None) -> str:
    """The params.yaml reference page: every key of pipeline.config.Params, recursively."""
    from pipeline import names
    from pipeline.config import Params

    path = params_yaml if params_yaml is not None else ROOT / "params.yaml"
    shipped = _Shipped([("", yaml.safe_load(path.read_text()) or {})])
    top = _Section(2, "Top-level keys", "top-level")
    sections = [top]
    _walk(Params, [], [], shipped, 2, top, sections)
    top.intro.append("Sections: " + ", ".join(f"[{code(s.title.strip('`'))}](#{s.anchor})"
                                               for s in sections[1:] if s.level == 2) + ".")
    intro = INTRO.replace("{names}", inline(names.ALLOWED))
    return intro + "\n" + "\n\n".join(s.markdown() for s in sections) + "\n"
