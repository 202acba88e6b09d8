"""Fuzz test of params.yaml and the search-space files (issue 14, part 7).

Every generated input is bad, and for every one `ctsweep check` must exit with status 2, print
exactly one line on stderr (no traceback: the exception is typer's Exit, never another), and
leave every file under the project byte-identical, none created or removed.

The cases come from a seeded generator rather than Hypothesis: no extra dependency, the same
cases on every run, and a failure names its case. It mutates a copy of the real params.yaml and
of the search spaces of the families it lists, which stays valid otherwise:
  - values: a wrong type in every place (a bool for a number, a string for a bool, a list for
    a mapping, a mapping for a list), NaN and infinities, huge, negative and zero counts, bad
    names ('.', '..', '', 'a/b', '/', '../x', '-x', ...), out-of-range references, bad
    distributions, steps, logs, choices and conditions, bad storage locations;
  - keys: unknown keys, keys twice (YAML), bad dataset and family names as keys;
  - bytes: alias bombs, recursive aliases, deep nesting, binary, UTF-16, Latin-1, NUL and
    control characters, a file over 1 MiB, files cut short inside a bracket, syntax errors.
`candidates()` lists every mutation (3,240 with the project's files as of issue 14: 1,073 of
params.yaml, the rest of the six spaces); FAST_CASES = 150 of them, drawn with SEED, run in a few
seconds (about 25 ms each); the slow test runs all of them (about two minutes). One more case
runs the installed `ctsweep check` as a real process: no library warning before the one line.
"""

from __future__ import annotations

import copy
import hashlib
import random
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest
import typer.main
import typer.testing
import yaml
from typer.testing import CliRunner

from pipeline.cli import app
from tests.conftest import REPO

SEED = 14
FAST_CASES = 150
NAN, INF = float("nan"), float("inf")
BAD_NAMES = [".", "..", "", "a/b", "/", "../x", "-x", "a b", "1abc", "x" * 65, "é", "a\\b", "a.b"]
BAD_OPTUNA = ["", "nosuch://x", "://x", "params.yaml", ".", "missing_dir/o.db", "sqlite://", "x\x00y", "x" * 5000]
BAD_STORAGE = ["", "nosuch://x", "s3:/bucket", "://x", "params.yaml", "params.yaml/x", "x\x00y",
               "file://host/x", "file:relative", "x" * 5000]


@dataclass(frozen=True)
class Case:
    name: str  # what was done, shown when the case fails
    file: str  # the file replaced, relative to the project root
    build: Callable[[], bytes]  # built when run: dumping every case up front takes seconds

    @property
    def data(self) -> bytes:
        return self.build()


def _baseline() -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    params = yaml.safe_load((REPO / "params.yaml").read_text())
    # a precompute list to mutate (the shipped params.yaml leaves it to profile fwp-eigenworms)
    spec = {"family": "nrde", "args": {"logsig_depth": 2, "logsig_step": 4}}
    params["prepare"]["eigenworms"].setdefault("precompute", [spec])
    spaces = {f: yaml.safe_load((REPO / "search_spaces" / f"{f}.yaml").read_text()) for f in params["families"]}
    return params, spaces


def _nodes(obj: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[tuple[Any, ...], Any]]:
    """Every (path, value) below the root, parents before children."""
    items = obj.items() if isinstance(obj, dict) else enumerate(obj) if isinstance(obj, list) else ()
    for key, value in items:
        yield path + (key,), value
        yield from _nodes(value, path + (key,))


def _replaced(root: Any, path: tuple[Any, ...], value: Any) -> Callable[[], Any]:
    def build() -> Any:
        out = copy.deepcopy(root)
        node = out
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = value
        return out
    return build


def _renamed(root: dict[str, Any], path: tuple[Any, ...], new_key: Any) -> Callable[[], Any]:
    def build() -> Any:
        out = copy.deepcopy(root)
        node = out
        for key in path[:-1]:
            node = node[key]
        node[new_key] = node.pop(path[-1])
        return out
    return build


def _const(value: Any) -> Callable[[], Any]:
    return lambda: value


def _by_type(value: Any) -> list[Any]:
    """Values of another type than `value`'s, or non-finite, or a count no field allows."""
    if isinstance(value, bool):
        return ["true", "yes", 1, 0, None, [True]]
    if isinstance(value, int):  # every int field is bounded on both sides; none takes a bool
        return [True, False, "3", "", 10**24, -1, [1], {"k": 1}, NAN]
    if isinstance(value, float):
        return [True, "0.5", NAN, INF, -INF, [0.5], {"k": 1.0}]
    if isinstance(value, str):
        return [1, True, None, [value], {"k": value}, "", "x" * 5000]
    if isinstance(value, list):
        return [{"k": 1}, "a", 5, True, None]
    return [[1, 2], "x", 5, True, None]  # a mapping


def _params_values(path: tuple[Any, ...], value: Any) -> list[Any]:
    if path[0] in ("datasets", "families") and len(path) == 2:
        return BAD_NAMES + [1, True, None, [value]]
    if path in [("datasets",), ("families",)]:
        return [[], value + value[:1], {"k": value[0]}, "a", None]
    if path == ("search", "optuna_storage"):
        return BAD_OPTUNA + [1, True, None]
    if path == ("search", "storage_path"):
        return BAD_STORAGE + [1, True, None]
    if path == ("final", "seeds"):
        return [[], [0, 0], [-1], [True], [1.5], list(range(101)), "0", None]
    if path == ("final", "lr_factors"):
        return [[1.0], [0.8, 0.8], [-0.5], [INF], [NAN], [True], ["0.8"], [0.5] * 17, {"k": 1}]
    if path[-1] == "kind":
        return ["xor2", "", 1, None, ["xor"], "x" * 5000]
    if path[-1] == "name" and path[0] == "prepare":
        return ["../x", "NotAnArchiveSet", "", "EigenWorm" * 1000, 1, None]
    if len(path) >= 4 and path[-2] == "precompute":  # a spec
        return [{"family": n, "args": {}} for n in ("..", "a/b", "nrdee")] + [
            {"family": "nrde", "args": {"logsig_depth": True}}, {"family": "nrde", "args": {"hidden_size": 3}}, 5]
    if path[-1] == "max_p_value":
        return [0, 1.5, NAN, True, "0.05"]
    return _by_type(value)


def _params_cases(params: dict[str, Any]) -> Iterator[tuple[str, Any]]:
    for path, value in _nodes(params):
        for bad in _params_values(path, value):
            yield f"{'.'.join(map(str, path))} = {_short(bad)}", _replaced(params, path, bad)
        if isinstance(value, dict):  # a misspelt key, an unknown dataset kind's entry or family: all refused
            yield f"{'.'.join(map(str, path))}: unknown key", _replaced(params, path + ("zz_unknown",), 1)
    for bad in ["..", "a/b", "", "-x", "x" * 65, 1, True, None]:
        yield f"prepare key {_short(bad)}", _renamed(params, ("prepare", "xor_event"), bad)
        for section in ("search", "final"):
            yield (f"{section}.family_resources key {_short(bad)}",
                   _replaced(params, (section, "family_resources"), {bad: {"cpu": 1}}))
    cross = {
        "family gpu 1.5": ("search", "family_resources", {"cfc": {"gpu": 1.5}}),
        "family cpu yes": ("search", "family_resources", {"cfc": {"cpu": "yes"}}),
        "family cpu true": ("search", "family_resources", {"cfc": {"cpu": True}}),
        "unknown family": ("search", "family_resources", {"transformer": {"cpu": 1}}),
        "final workers 2": ("final", "family_resources", {"cfc": {"workers": 2}}),
        "final gpu 2.5": ("final", "family_resources", {"cfc": {"gpu": 2.5}}),
        "family list": ("final", "family_resources", [{"cfc": {"cpu": 1}}]),
        "seeds_required 6": ("promote", "seeds_required", 6),
        "grace nan": ("search", "asha", {"grace_period": NAN}),
    }
    for name, (section, key, value) in cross.items():
        yield name, _replaced(params, (section, key), value)
    yield "dataset without prepare", _replaced(params, ("datasets",), params["datasets"] + ["zzz"])
    yield "top level: unknown key", _const({**params, "zz_unknown": 1})
    yield "top level: list", _const([params])
    yield "top level: scalar", _const("params")
    for section in ("datasets", "families", "prepare"):
        yield f"no {section}", _const({k: v for k, v in params.items() if k != section})


def _space_values(path: tuple[Any, ...], value: Any) -> list[Any]:
    top = path[0]
    if len(path) == 1:
        return [[1], "x", 5, True]
    if top == "params" and len(path) == 2:
        return [None, [1], "x", 5, {"distribution": "uniform"}, {}]
    if top == "params" and len(path) == 3:
        return {"distribution": ["normal", 1, None, True, ""],
                "low": [NAN, INF, "1", True, None, 10**24], "high": [NAN, -INF, "1", True, None, -(10**24)],
                "step": [0, -1, True, 1.5, "2", 10**24, None], "log": ["false", "true", 1, 0, None],
                "choices": [[], "a", {"a": 1}, None, [[1]], [NAN], value[:1] * 2 if isinstance(value, list) else []],
                "when": [["a"], "x", 5, {"zz_unknown": 1}]}[path[2]]
    if top == "params" and path[2] == "choices":
        return [[1], {"a": 1}, NAN, INF]
    if top == "params" and path[2] == "when":
        return [[], "zz_not_a_value", [[1]], {"k": 1}, NAN]
    if top == "reference":
        return [10**24, NAN, "zz_not_a_choice", [1], {"k": 1}]
    if path == ("fixed", "batch_size"):
        return [0, -1, True, 1.5, "32", 10**24, None, NAN]
    if top == "fixed":
        return [[1], {"a": 1}, NAN, INF, 1 if isinstance(value, str) else "zz"]
    return _by_type(value)


def _space_cases(space: dict[str, Any]) -> Iterator[tuple[str, Any]]:
    for path, value in _nodes(space):
        for bad in _space_values(path, value):
            yield f"{'.'.join(map(str, path))} = {_short(bad)}", _replaced(space, path, bad)
    yield "unknown top-level key", _const({**space, "constants": {}})
    yield "unknown param", _replaced(space, ("params", "zz_unknown"), {"distribution": "uniform", "low": 0, "high": 1})
    yield "unknown fixed key", _replaced(space, ("fixed",), {**(space.get("fixed") or {}), "hiden_size": 3})
    yield "lr not searched", _replaced(space, ("params",), {k: v for k, v in space["params"].items() if k != "lr"})
    yield "lr uniform", _replaced(space, ("params", "lr"), {**space["params"]["lr"], "distribution": "uniform"})
    yield "top level: list", _const([space])
    yield "top level: scalar", _const("space")


def _text_cases(text: str) -> Iterator[tuple[str, bytes]]:
    """Byte-level damage any YAML file can suffer."""
    lines = text.splitlines(keepends=True)
    first = next(i for i, line in enumerate(lines) if line[:1].isalpha())  # a top-level key
    yield "empty file", b""
    yield "only a comment", b"# nothing\n"
    yield "duplicate top-level key", (text + lines[first]).encode()
    yield "alias bomb", (text + "zz_lol: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n" + "".join(
        f"zz_{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]\n" for i in range(1, 9))).encode()
    yield "recursive alias", (text + "zz_loop: &loop [*loop]\n").encode()
    yield "too many aliases", (text + "zz_one: &one 1\nzz_many: [" + ", ".join(["*one"] * 101) + "]\n").encode()
    yield "deep nesting", (text + "zz_deep: " + "[" * 5000 + "]" * 5000 + "\n").encode()
    yield "binary", bytes(range(256)) * 4
    yield "utf-16", text.encode("utf-16")
    yield "utf-16-le without BOM", text.encode("utf-16-le")
    yield "latin-1 byte", text.encode() + b"# caf\xe9\n"
    yield "NUL byte", text.encode() + b"\x00"
    yield "control character", (text + 'zz: "\x07"\n').encode()
    yield "over 1 MiB", text.encode() + b"#" * (1 << 20) + b"\n"
    yield "tab indentation", (text + "zz:\n\tx: 1\n").encode()
    yield "mapping value in a scalar", (text + "zz: a: b\n").encode()
    yield "unclosed quote", (text + 'zz: "abc\n').encode()
    yield "bad indentation", "".join(lines[:first + 1] + ["   " + lines[first + 1]] + lines[first + 2:]).encode() \
        if first + 1 < len(lines) and lines[first + 1][:1] == " " else (text + "zz: 1\n  yy: 2\n").encode()
    yield "python tag", (text + "zz: !!python/object/apply:os.system [ls]\n").encode()
    yield "second document", (text + "---\nzz: 1\n").encode()
    for i, line in enumerate(lines):  # cut short inside a flow collection: always a syntax error
        code = line.split("#", 1)[0]
        opening = next((j for j, c in enumerate(code) if c in "[{"), None)
        if opening is not None:
            closing = _closing(code, opening)
            cut = "".join(lines[:i]) + line[: opening + 1 + (closing - opening - 1) // 2]
            yield f"cut short in line {i + 1}", cut.encode()


def _closing(line: str, opening: int) -> int:
    """Where the bracket opened at `opening` closes (the end of the line if it does not)."""
    depth = 0
    for j in range(opening, len(line)):
        depth += {"[": 1, "{": 1, "]": -1, "}": -1}.get(line[j], 0)
        if depth == 0:
            return j
    return len(line)


def _short(value: Any) -> str:
    text = repr(value) if not isinstance(value, (dict, list)) else f"<{type(value).__name__} of {len(value)}>"
    return text if len(text) <= 30 else text[:27] + "..."


def _dumped(build: Callable[[], Any]) -> Callable[[], bytes]:
    dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
    return lambda: yaml.dump(build(), Dumper=dumper, sort_keys=False, allow_unicode=True).encode()


def candidates() -> list[Case]:
    """Every bad input the generator knows, in a fixed order."""
    params, spaces = _baseline()
    cases = [Case(f"params: {n}", "params.yaml", _dumped(b)) for n, b in _params_cases(params)]
    text = (REPO / "params.yaml").read_text()
    cases += [Case(f"params bytes: {n}", "params.yaml", _const(b)) for n, b in _text_cases(text)]
    for family, space in spaces.items():
        file = f"search_spaces/{family}.yaml"
        cases += [Case(f"{family}: {n}", file, _dumped(b)) for n, b in _space_cases(space)]
        cases += [Case(f"{family} bytes: {n}", file, _const(b)) for n, b in _text_cases((REPO / file).read_text())]
    return cases


def _tree(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir"
            for p in sorted(root.rglob("*"))}


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("fuzz")
    shutil.copytree(REPO / "search_spaces", root / "search_spaces")
    shutil.copy(REPO / "params.yaml", root / "params.yaml")
    return root


def _failure(root: Path, case: Case, runner: CliRunner) -> str | None:
    """None if `ctsweep check` refused `case` as it should; else what went wrong."""
    target = root / case.file
    original = target.read_bytes()
    target.write_bytes(case.data)
    try:
        before = _tree(root)
        result = runner.invoke(app, ["check", "--root", str(root)])
        changed = sorted(set(before.items()) ^ set(_tree(root).items()))
    finally:
        target.write_bytes(original)
    lines = result.stderr.splitlines()
    if not isinstance(result.exception, SystemExit) or result.exit_code != 2:
        return f"{case.name}: exit {result.exit_code}, {type(result.exception).__name__}: {result.exception}"
    if len(lines) != 1 or not lines[0].startswith("ctsweep: error: ") or "Traceback" in result.stderr:
        return f"{case.name}: stderr {result.stderr!r}"
    if changed:
        return f"{case.name}: changed {changed[:3]}"
    return None


def _run(root: Path, cases: list[Case], monkeypatch: pytest.MonkeyPatch) -> None:
    # typer's CliRunner builds the Click command from the app again on every invoke (about 25 ms of
    # signature introspection, a third of a case): built once here, the same command every time.
    command = typer.main.get_command(app)
    monkeypatch.setattr(typer.testing, "_get_command", lambda _app: command)
    runner = CliRunner()
    assert runner.invoke(app, ["check", "--root", str(root)]).exit_code == 0, "the baseline must pass"
    failures = [f for f in (_failure(root, c, runner) for c in cases) if f]
    assert not failures, f"{len(failures)} of {len(cases)} bad inputs not refused cleanly:\n" + "\n".join(failures[:20])


def test_generator_is_deterministic() -> None:
    cases, again = candidates(), candidates()
    assert len(cases) > 3000 and [c.name for c in cases] == [c.name for c in again]
    sample = random.Random(SEED).sample(range(len(cases)), FAST_CASES)
    assert all(cases[i].data == again[i].data != (REPO / cases[i].file).read_bytes() for i in sample)


def test_sample_of_bad_inputs_is_refused_in_one_line(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cases = random.Random(SEED).sample(candidates(), FAST_CASES)
    _run(project, cases, monkeypatch)


@pytest.mark.timeout(600)
@pytest.mark.slow
def test_every_bad_input_is_refused_in_one_line(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _run(project, candidates(), monkeypatch)


def test_a_real_process_prints_one_line(project: Path) -> None:
    """No library warning or log line before the error: the installed console script, as a user runs it."""
    script = Path(sys.executable).with_name("ctsweep")
    target = project / "params.yaml"
    original = target.read_bytes()
    target.write_bytes("search: {epochs: true}\n".encode("utf-16"))
    try:
        result = subprocess.run([str(script), "check", "--root", str(project)], capture_output=True, text=True,
                                timeout=120)
    finally:
        target.write_bytes(original)
    assert result.returncode == 2, result.stderr
    assert len(result.stderr.splitlines()) == 1 and "Traceback" not in result.stderr, result.stderr
    assert result.stderr.startswith("ctsweep: error: ") and "UTF-16" in result.stderr
