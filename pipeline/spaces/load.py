"""Reading a search-space file (search_spaces/<family>.yaml, or a user family's own) into a checked
SearchSpace, and finding the file of a family.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pipeline.config import read_yaml
from pipeline.errors import ConfigError
from pipeline.models.user import source_of
from pipeline.names import check_name
from pipeline.spaces.checks import _check_protocol, _check_reference
from pipeline.spaces.parse import _check_value, _err, _few, _mapping, _model_arguments, _parse_param, _per_dataset
from pipeline.spaces.space import ParamSpec, SearchSpace

_TOP_KEYS = ("reference", "params", "fixed")


def load_space(path: str | Path, family: str | None = None) -> SearchSpace:
    """Read and validate a search-space file; the family defaults to the file's stem."""
    path = Path(path)
    family = check_name(family if family is not None else path.stem, f"{path}: the family name")
    if not path.exists():
        raise ConfigError(_missing(path, family))
    raw = read_yaml(path)
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: expected a mapping with keys {list(_TOP_KEYS)}, got {type(raw).__name__}")
    unknown = [k for k in raw if k not in _TOP_KEYS]
    if unknown:
        raise ConfigError(f"{path}: unknown top-level keys {_few(unknown)}; allowed: {sorted(_TOP_KEYS)}")
    raw_params = _mapping(path, raw.get("params"), "params", "param names to distributions")
    fixed, fixed_by = _per_dataset(path, raw.get("fixed"), "fixed")
    reference, reference_by = _per_dataset(path, raw.get("reference"), "reference")
    variants = {None: fixed, **fixed_by}  # None: the default
    for name, values in variants.items():
        clash = set(values) & set(raw_params)
        if clash:
            where = "fixed" if name is None else f"fixed.{name}"
            raise ConfigError(f"{path}: keys {_few(sorted(clash))} are both searched and fixed ({where}); "
                              "allowed: one or the other")
    arguments = _model_arguments(path, family, set(raw_params).union(*variants.values()))
    params: dict[str, ParamSpec] = {}
    for name, spec in raw_params.items():
        params[name] = _parse_param(path, name, spec, params, arguments)
    for variant, values in variants.items():
        prefix = "fixed" if variant is None else f"fixed.{variant}"
        for name, value in values.items():
            _check_value(path, f"{prefix}.{name}", name, value, arguments)
        _check_protocol(path, params, values)
        if "batch_size" not in params and "batch_size" not in values:
            raise _err(path, f"{prefix}.batch_size", "batch_size must be searched or fixed")
    if "lr" not in params or params["lr"].distribution != "loguniform":
        raise _err(path, "params.lr", "the learning rate must be searched with distribution: loguniform")
    space = SearchSpace(family, params, fixed, reference, path,
                        {d: reference_by.get(d, reference) for d in set(reference_by) | set(fixed_by)},
                        {d: fixed_by.get(d, fixed) for d in set(reference_by) | set(fixed_by)})
    written = list(raw.get("reference") or {}) + list(raw.get("fixed") or {})  # the file's order
    for dataset in [None, *sorted(space.references, key=lambda d: (written.index(d), d) if d in written else (0, d))]:
        resolved = space if dataset is None else space.for_dataset(dataset)
        key = "reference" if dataset is None else f"reference.{dataset}"
        key = "reference.default" if reference_by and dataset is None else key
        try:
            _check_reference(path, resolved, resolved.reference, key)
        except ConfigError as exc:
            anchor = _anchor_of(raw.get("reference"), dataset)
            if anchor is None:
                raise
            raise ConfigError(str(exc).replace(f"key `{key}`", f"key `reference.{anchor}` (through its YAML alias "
                                                               f"in reference.{dataset})", 1)) from None
    return space


def _missing(path: Path, family: str) -> str:
    """A family's space file that is not there: which params.yaml key names it, and where a new
    one comes from (the repository's search_spaces/ holds the built-in families'; the package
    ships none, and `ctsweep new-family` writes a template only with a new family's model)."""
    from pipeline.models.builtin import BUILTIN_FAMILIES

    if family in BUILTIN_FAMILIES:
        return (f"{path} does not exist: it is the search space of the built-in family {family!r} that params.yaml "
                f"`families` lists; restore the file from ctsweep's repository (`git checkout -- "
                f"search_spaces/{family}.yaml` in a clone, or copy its search_spaces/{family}.yaml), or remove "
                f"{family!r} from `families`")
    source = source_of(family)
    if source is not None:
        declared = source.origin or "an entry point"
        return (f"{path} does not exist: it is the search space of family {family!r} ({declared}) that params.yaml "
                f"`families` lists; write it as docs/reference/search-spaces.md describes "
                f"(or give the family's `space` in params.yaml `user_families`), or remove {family!r} from `families`")
    return f"{path} does not exist: no search space for family {family!r}"


def _anchor_of(raw_reference: Any, dataset: str | None) -> str | None:
    """The earlier entry of `reference:` whose block `dataset`'s entry repeats through a YAML alias
    (`xor_dense: *s1`: the very mapping of `xor_event: &s1`), so an error names the block a user
    edits, not the alias."""
    if not isinstance(raw_reference, dict) or dataset not in raw_reference:
        return None
    entry = raw_reference[dataset]
    first = next(name for name, other in raw_reference.items() if other is entry)  # the anchor comes first
    return first if first != dataset else None


def space_path(root: Path, family: str) -> Path:
    """search_spaces/<family>.yaml, or the `space` a user family's params.yaml entry gives."""
    source = source_of(family)
    if source is not None and source.space is not None:
        return Path(source.space)
    return root / "search_spaces" / f"{family}.yaml"
