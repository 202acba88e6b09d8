"""The package's layout holds: no import circle anywhere in pipeline/, no import from a lower layer
up to a higher one (pipeline.LAYERS), and each subpackage's `Imports:` line names every subpackage
it imports. Imports count wherever they are written: at module level, inside functions and under
`if TYPE_CHECKING:` (ast.walk visits them all)."""

from __future__ import annotations

import ast
import re
import shutil
from pathlib import Path

import pytest

import pipeline
from tests.conftest import REPO

ROOT = "pipeline"


def modules(package_dir: Path) -> dict[str, Path]:
    """Every module of the package at `package_dir` by dotted name (a package under its own name)."""
    found = {}
    for path in sorted(package_dir.rglob("*.py")):
        parts = list(path.relative_to(package_dir.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def imported(path: Path, name: str, known: set[str]) -> set[str]:
    """The modules of `known` that `path` (module `name`) imports anywhere in its body.

    `from a.b import c` imports a.b.c when that is a module, else a.b; either way Python runs
    every package above it first, so those count too, except the packages above `name` itself,
    which are already running when `name` runs (a package's __init__ importing its own modules
    is not a circle). Relative imports are resolved against `name`'s package.
    """
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    ancestors = {".".join(name.split(".")[:i]) for i in range(1, name.count(".") + 1)}
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                anchor = ".".join(parts[:len(parts) - node.level + 1])
                base = f"{anchor}.{base}" if base else anchor
            targets = [base] + [f"{base}.{alias.name}" for alias in node.names]
        else:
            continue
        for target in targets:
            parts = target.split(".")
            found |= {".".join(parts[:i]) for i in range(1, len(parts) + 1)} & known
    return found - ancestors - {name}


def import_graph(package_dir: Path) -> dict[str, set[str]]:
    found = modules(package_dir)
    known = set(found)
    return {name: imported(path, name, known) for name, path in found.items()}


def cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of `graph` as [a, b, ..., a], or None when it is acyclic (depth-first search)."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state and (found := visit(nxt)) is not None:
                return found
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)) is not None:
            return found
    return None


def unit_of(module: str, layers: tuple[tuple[str, ...], ...]) -> str | None:
    """The longest unit of `layers` that `module` lies in (None: the root package itself)."""
    units = [u for layer in layers for u in layer]
    inside = [u for u in units if module == f"{ROOT}.{u}" or module.startswith(f"{ROOT}.{u}.")]
    return max(inside, key=len) if inside else None


def layer_index(layers: tuple[tuple[str, ...], ...]) -> dict[str, int]:
    return {unit: i for i, layer in enumerate(layers) for unit in layer}


def upward_imports(graph: dict[str, set[str]], layers: tuple[tuple[str, ...], ...]) -> list[str]:
    """Every import of a module from one in the same layer or a higher one, as 'a -> b'."""
    index = layer_index(layers)
    bad = []
    for source, targets in sorted(graph.items()):
        here = unit_of(source, layers)
        if here is None:  # the root package's __init__: it installs pipeline.moved, nothing more
            bad += [f"{source} -> {t}" for t in sorted(targets) if unit_of(t, layers) != "moved"]
            continue
        for target in sorted(targets):
            there = unit_of(target, layers)
            if there is None:
                bad.append(f"{source} -> {target} (no unit of LAYERS holds it)")
            elif there != here and index[there] >= index[here]:
                bad.append(f"{source} ({here}, layer {index[here]}) -> {target} ({there}, layer {index[there]})")
    return bad


def declared_imports(init: Path) -> set[str] | None:
    """The names on the `Imports:` line of a package's docstring (None: it has none)."""
    doc = ast.get_docstring(ast.parse(init.read_text())) or ""
    match = re.search(r"^Imports:(.*?)(?:\(|\.\s|\.\Z|\n\s*\n|\Z)", doc, re.M | re.S)
    if match is None:
        return None
    text = match.group(1)
    if text.strip().startswith("nothing"):
        return set()
    return {name for name in re.findall(r"[a-z_][a-z_.]*[a-z_]|[a-z]", text) if name != "and"}


def package_imports(graph: dict[str, set[str]], package: str) -> set[str]:
    """What the modules of `package` (dotted, without the root) import outside it, named as its
    `Imports:` line names them: inside the same parent package by the sibling's name (models.base,
    data.contract), everything else by its top-level name (errors, config)."""
    prefix = f"{ROOT}.{package}"
    parent = package.rpartition(".")[0]
    found = set()
    for source, targets in graph.items():
        if source != prefix and not source.startswith(prefix + "."):
            continue
        for target in targets:
            if target == prefix or target.startswith(prefix + "."):
                continue
            rel = target[len(ROOT) + 1:]
            if parent and (rel == parent or rel.startswith(parent + ".")):
                found.add(".".join(rel.split(".")[:parent.count(".") + 2]))
            else:
                found.add(rel.split(".")[0])
    return found


def subpackages(package_dir: Path) -> list[str]:
    """Every subpackage, dotted without the root (models.cfc, sweep, data.kinds.local, ...)."""
    return sorted(".".join(p.parent.relative_to(package_dir).parts) for p in package_dir.rglob("__init__.py")
                  if p.parent != package_dir)


PACKAGE_DIR = REPO / ROOT


def test_no_import_circle_anywhere_in_the_package() -> None:
    found = cycle(import_graph(PACKAGE_DIR))
    assert found is None, "import circle in pipeline/: " + " -> ".join(found or [])


def test_no_import_runs_from_a_lower_layer_up_to_a_higher_one() -> None:
    bad = upward_imports(import_graph(PACKAGE_DIR), pipeline.LAYERS)
    assert bad == [], "imports against pipeline.LAYERS:\n" + "\n".join(bad)


def test_every_module_lies_in_a_unit_of_the_layers() -> None:
    lost = [m for m in modules(PACKAGE_DIR) if m != ROOT and unit_of(m, pipeline.LAYERS) is None]
    assert lost == []
    units = [u for layer in pipeline.LAYERS for u in layer]
    assert len(units) == len(set(units))
    missing = [u for u in units if not (PACKAGE_DIR / Path(*u.split("."))).with_suffix(".py").is_file()
               and not (PACKAGE_DIR / Path(*u.split(".")) / "__init__.py").is_file()]
    assert missing == [], f"units of pipeline.LAYERS with no module or package: {missing}"


@pytest.mark.parametrize("package", subpackages(PACKAGE_DIR))
def test_each_subpackage_says_what_it_is_and_what_it_imports(package: str) -> None:
    init = PACKAGE_DIR / Path(*package.split(".")) / "__init__.py"
    doc = ast.get_docstring(ast.parse(init.read_text()))
    assert doc and len(doc.split("\n\n")[0]) > 40, f"{init}: a docstring saying what the concept is"
    declared = declared_imports(init)
    assert declared is not None, f"{init}: no `Imports:` line"
    actual = package_imports(import_graph(PACKAGE_DIR), package)
    assert actual <= declared, f"{init}: imports {sorted(actual - declared)}, not on its `Imports:` line"
    # what it may import lies below it in pipeline.LAYERS (inside its own unit, the circle test rules)
    index = layer_index(pipeline.LAYERS)
    own = unit_of(f"{ROOT}.{package}", pipeline.LAYERS)
    units = {d: unit_of(f"{ROOT}.{d}", pipeline.LAYERS) for d in declared}
    above = sorted(d for d, u in units.items() if u is None or (u != own and index[u] >= index[own]))
    assert above == [], f"{init}: `Imports:` names {above}, which are not below {own} in pipeline.LAYERS"


def test_the_top_level_holds_subpackages_and_a_few_shared_modules() -> None:
    top = sorted(p.stem for p in PACKAGE_DIR.glob("*.py") if p.name != "__init__.py")
    assert top == ["errors", "moved", "names"]
    assert (PACKAGE_DIR / "cli" / "__init__.py").is_file()


def test_a_deliberate_circle_is_found_and_so_is_the_upward_import(tmp_path: Path) -> None:
    # The verdicts above mean something only if they would catch a break: a copy of the package
    # where pipeline.stores.paths imports the search driver lazily, inside a function (the driver
    # imports paths, so this closes a circle and runs from layer stores up to layer sweep).
    copy = tmp_path / ROOT
    shutil.copytree(PACKAGE_DIR, copy, ignore=shutil.ignore_patterns("__pycache__"))
    paths = copy / "stores" / "paths.py"
    paths.write_text(paths.read_text() + "\n\ndef _later():\n    from pipeline.sweep import search\n")
    graph = import_graph(copy)
    found = cycle(graph)
    assert found is not None and "pipeline.stores.paths" in found and "pipeline.sweep.search" in found, found
    bad = upward_imports(graph, pipeline.LAYERS)
    assert any(b.startswith("pipeline.stores.paths (stores") and "pipeline.sweep.search" in b for b in bad), bad
    assert "stores" in package_imports(graph, "sweep")
    assert "sweep" in package_imports(graph, "stores")


def test_type_checking_imports_count(tmp_path: Path) -> None:
    source = tmp_path / "x.py"
    source.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pipeline.sweep.y import Y\n"
                      "def f():\n    from pipeline.sweep import z\n    from . import w\n")
    known = {"pipeline.sweep.x", "pipeline.sweep.y", "pipeline.sweep.z", "pipeline.sweep.w", "pipeline.sweep"}
    # pipeline.sweep is x's own package: already running when x runs, so not an edge
    assert imported(source, "pipeline.sweep.x", known) == {"pipeline.sweep.y", "pipeline.sweep.z", "pipeline.sweep.w"}


def test_the_cycle_finder_finds_cycles() -> None:
    assert cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert cycle({"a": {"b"}, "b": set(), "c": {"b"}}) is None


def test_the_imports_line_is_read() -> None:
    assert declared_imports(PACKAGE_DIR / "sweep" / "__init__.py") is not None
    assert declared_imports(PACKAGE_DIR / "models" / "cfc" / "__init__.py") >= {"models.base"}


def test_the_sweep_package_itself_imports_nothing() -> None:
    # No re-exports: importing pipeline.sweep must not load Ray, Optuna or MLflow.
    tree = ast.parse((PACKAGE_DIR / "sweep" / "__init__.py").read_text())
    assert not [n for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))]


def test_trial_and_distributed_share_a_module_instead_of_importing_each_other() -> None:
    graph = import_graph(PACKAGE_DIR)
    assert "pipeline.sweep.trial" not in graph["pipeline.sweep.distributed"]
    assert "pipeline.sweep.context" in graph["pipeline.sweep.trial"]
    assert "pipeline.sweep.context" in graph["pipeline.sweep.distributed"]
