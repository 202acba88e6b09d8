"""The search machinery lives in one subpackage, pipeline/sweep, whose modules import each other
without a cycle: not at module level, not inside functions, not under `if TYPE_CHECKING:`."""

from __future__ import annotations

import ast
from pathlib import Path

PIPELINE = Path(__file__).resolve().parents[1] / "pipeline"
SWEEP = PIPELINE / "sweep"
PACKAGE = "pipeline.sweep"
MOVED = ("search", "trial", "scheduling", "distributed", "cluster", "sensitivity", "run_lookup")


def _modules() -> dict[str, Path]:
    """pipeline.sweep's modules by dotted name (the package's __init__ under the package's name)."""
    found = {}
    for path in sorted(SWEEP.glob("*.py")):
        found[PACKAGE if path.stem == "__init__" else f"{PACKAGE}.{path.stem}"] = path
    return found


def _imported(path: Path, name: str, known: set[str]) -> set[str]:
    """Every module of `known` that `path` imports anywhere in its body (ast.walk visits function
    bodies and `if TYPE_CHECKING:` blocks alike). `from pkg import mod` counts as importing
    pkg.mod when that is a module; relative imports are resolved against `name`'s package."""
    package = name if path.stem == "__init__" else name.rpartition(".")[0]
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
            # `import pipeline.sweep.trial` also imports pipeline.sweep: each prefix counts
            parts = target.split(".")
            found |= {".".join(parts[:i]) for i in range(1, len(parts) + 1)} & known
    found.discard(name)
    return found


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    known = set(modules)
    return {name: _imported(path, name, known) for name, path in modules.items()}


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
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


def test_the_sweep_modules_import_each_other_without_a_cycle() -> None:
    graph = _graph()
    assert {f"{PACKAGE}.{m}" for m in MOVED} <= set(graph), sorted(graph)
    cycle = _cycle(graph)
    assert cycle is None, "import cycle in pipeline/sweep: " + " -> ".join(cycle or [])


def test_trial_and_distributed_share_a_module_instead_of_importing_each_other() -> None:
    graph = _graph()
    assert f"{PACKAGE}.trial" not in graph[f"{PACKAGE}.distributed"]
    assert f"{PACKAGE}.context" in graph[f"{PACKAGE}.trial"]
    assert f"{PACKAGE}.context" in graph[f"{PACKAGE}.distributed"]


def test_the_package_itself_imports_nothing() -> None:
    # No re-exports: importing pipeline.sweep must not load Ray, Optuna or MLflow.
    tree = ast.parse((SWEEP / "__init__.py").read_text())
    assert not [n for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))]


def test_the_cycle_finder_finds_cycles() -> None:
    # The acyclic verdict above means something only if a cycle, lazy or not, would be caught.
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set(), "c": {"b"}}) is None


def test_the_cycle_finder_sees_lazy_and_type_checking_imports(tmp_path: Path) -> None:
    known = {f"{PACKAGE}.x", f"{PACKAGE}.y", f"{PACKAGE}.z", PACKAGE}
    source = tmp_path / "x.py"
    source.write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n"
        "    from pipeline.sweep.y import Y\n"
        "def f():\n"
        "    from pipeline.sweep import z\n"
        "    from . import x\n")
    assert _imported(source, f"{PACKAGE}.x", known) == {f"{PACKAGE}.y", f"{PACKAGE}.z", PACKAGE}


def test_the_old_module_paths_are_gone() -> None:
    assert [m for m in MOVED if (PIPELINE / f"{m}.py").exists()] == []
    assert all((SWEEP / f"{m}.py").is_file() for m in MOVED)
