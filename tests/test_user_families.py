"""Families from user code: declared in params.yaml or by an entry point, refused with one line
when they cannot be used, found again in a fresh process, checked by `ctsweep check-family`, and
written by `ctsweep new-family`."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from pipeline.models import user as user_families
from pipeline.cli import app
from pipeline.config import load_params
from pipeline.errors import ConfigError
from pipeline.families.check import check_family
from pipeline.families.template import new_family
from pipeline.models import MODELS, family_names, get_model_class
from pipeline.spaces import load_space, space_path
from tests.conftest import REPO, default_params, doc_blocks, write_params

GOOD = '''
import torch
from torch import nn
from pipeline.models.base import SequenceModel, gather_steps, last_valid_index


class Tiny(SequenceModel):
    def __init__(self, *, input_channels, output_size, per_step=False, width=8):
        super().__init__(input_channels=input_channels, output_size=output_size, per_step=per_step)
        self.inner = nn.Linear(input_channels + 1, width)
        self.head = nn.Linear(width, output_size)

    def forward(self, x, dt, mask):
        out = self.head(torch.tanh(self.inner(torch.cat([x, dt[..., None]], -1))).cumsum(1))
        return out if self.per_step else gather_steps(out, last_valid_index(mask))
'''
SPACE = {"reference": {"lr": 0.01, "width": 8},
         "params": {"lr": {"distribution": "loguniform", "low": 1e-3, "high": 1e-1},
                    "width": {"distribution": "int", "low": 4, "high": 16}}, "fixed": {"batch_size": 16}}


WAITING_NOTICE = re.compile(r"ctsweep: waiting for (`import \w+`(, )?)+ \(a family's module, imported first in a separate "
                            r"process\) to finish: up to \d+ s in all \(CTSWEEP_IMPORT_TIMEOUT=<seconds> sets the "
                            r"limit per module\)")


def without_waiting_notice(text: str) -> list[str]:
    """`text`'s lines less the probe's waiting notice, whose text is checked where it appears.

    The notice comes WAITING_NOTICE_S (4 s) after the import probe starts if the modules still
    import: on a loaded machine importing torch alone can take that long, so whether it is printed
    is timing, not behaviour a test can pin down."""
    lines = text.splitlines()
    noticed = [line for line in lines if line.startswith("ctsweep: waiting for ")]
    assert all(WAITING_NOTICE.fullmatch(line) for line in noticed), noticed
    return [line for line in lines if line not in noticed]


@pytest.fixture(autouse=True)
def _clean_registry():
    yield
    user_families.forget()
    for name in [m for m in sys.modules if m.startswith("uf_")]:  # each test's own modules
        del sys.modules[name]


def _module(root: Path, name: str, text: str = GOOD) -> None:
    (root / f"{name}.py").write_text(textwrap.dedent(text))


def _project(root: Path, declared: dict, families: list[str] | None = None) -> Path:
    raw = default_params()
    raw["user_families"] = declared
    raw["families"] = families or ["cfc"]
    for name in declared:
        (root / "search_spaces").mkdir(exist_ok=True)
        (root / "search_spaces" / f"{name}.yaml").write_text(yaml.safe_dump(SPACE))
    return write_params(root, raw)


def test_a_family_declared_in_params_yaml_is_a_family_like_the_built_in_ones(tmp_path: Path) -> None:
    _module(tmp_path, "uf_models")
    params = load_params(_project(tmp_path, {"tiny": "uf_models:Tiny"}, ["cfc", "tiny"]))
    assert params.families == ["cfc", "tiny"] and "tiny" in family_names() and "tiny" not in MODELS
    assert get_model_class("tiny").__name__ == "Tiny"
    assert space_path(tmp_path, "tiny") == tmp_path / "search_spaces" / "tiny.yaml"
    assert load_space(space_path(tmp_path, "tiny"), "tiny").reference == {"lr": 0.01, "width": 8}
    assert user_families.code_path("tiny") == tmp_path / "uf_models.py"
    digest = user_families.code_digest("tiny")
    _module(tmp_path, "uf_models", GOOD + "\n# changed\n")
    assert user_families.code_digest("tiny") != digest  # its search results go stale with its code
    assert user_families.code_digest("cfc") is None


def test_a_deleted_space_file_of_a_user_family_names_its_params_yaml_entry(tmp_path: Path) -> None:
    """Issue 73, item 6: `ctsweep check` said only that the file "does not exist"."""
    _module(tmp_path, "uf_gone")
    params = _project(tmp_path, {"gone": "uf_gone:Tiny"}, ["cfc", "gone"])
    space = tmp_path / "search_spaces" / "gone.yaml"
    space.unlink()
    shutil.copy(REPO / "search_spaces" / "cfc.yaml", tmp_path / "search_spaces" / "cfc.yaml")
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    result = CliRunner().invoke(app, ["check", "--root", str(tmp_path)])
    assert (result.exit_code, result.stdout) == (2, ""), result.output
    assert without_waiting_notice(result.stderr) == [
        f"ctsweep: error: {space} does not exist: it is the search space of family 'gone' ({params}: "
        f"user_families.gone) that params.yaml `families` lists; write it as docs/reference/search-spaces.md "
        f"describes (or give the family's `space` in params.yaml `user_families`), or remove 'gone' from `families`"]
    assert {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file() and "__pycache__" not in p.parts} == {
        p: b for p, b in before.items() if "__pycache__" not in p.parts}


def test_a_space_file_given_next_to_the_import_path_is_used(tmp_path: Path) -> None:
    _module(tmp_path, "uf_spaced")
    (tmp_path / "spaces").mkdir()
    (tmp_path / "spaces" / "mine.yaml").write_text(yaml.safe_dump(SPACE))
    load_params(_project(tmp_path, {"tiny2": {"model": "uf_spaced:Tiny", "space": "spaces/mine.yaml"}}))
    assert space_path(tmp_path, "tiny2") == tmp_path / "spaces" / "mine.yaml"


@pytest.mark.parametrize("declared, message", [
    ({"cfc": "uf_x:Tiny"}, r"family 'cfc' \(.*params.yaml: user_families.cfc\) has the name of a built-in family"),
    ({"mine": "uf_absent.sub:Model"}, r"family 'mine' .*`import uf_absent.sub` failed: ModuleNotFoundError: No module named 'uf_absent'"),
    ({"mine": "uf_raises:Tiny"}, r"family 'mine' .*`import uf_raises` failed: RuntimeError: needs a GPU driver"),
    ({"mine": "uf_x:Nope"}, r"family 'mine' .*module uf_x \(.*uf_x.py\) has no attribute 'Nope'"),
    ({"mine": "uf_x:helper"}, r"family 'mine' .*uf_x:helper is not a model class; allowed: a subclass of .*SequenceModel"),
    ({"mine": "uf_x.Tiny"}, r"key `user_families.mine`: 'uf_x.Tiny' is not an import path; allowed: 'package.module:ClassName'"),
    ({"mine": {"model": "uf_x:Tiny", "spce": "a.yaml"}}, r"key `user_families.mine`: unknown keys \['spce'\]"),
    ({"mine": {"model": "uf_x:Tiny", "space": "missing.yaml"}}, r"key `user_families.mine.space`: no such file .*missing.yaml"),
    ({"bad name": "uf_x:Tiny"}, r"key `user_families`: the family name"),
])
def test_a_family_that_cannot_be_used_is_refused_in_one_line(tmp_path: Path, declared: dict, message: str) -> None:
    _module(tmp_path, "uf_x", GOOD + "\ndef helper():\n    pass\n")
    _module(tmp_path, "uf_raises", "raise RuntimeError('needs a GPU driver')\n")
    path = _project(tmp_path, {})
    raw = yaml.safe_load(path.read_text())
    raw["user_families"] = declared
    write_params(tmp_path, raw)
    with pytest.raises(ConfigError, match=message) as info:
        load_params(path)
    assert "\n" not in str(info.value)


def test_an_unknown_family_names_the_user_families_section(tmp_path: Path) -> None:
    path = _project(tmp_path, {}, ["cfc", "not_declared"])
    with pytest.raises(ConfigError, match=r"unknown families \['not_declared'\].*`user_families`"):
        load_params(path)


def _distribution(site: Path, entry: str, module: str = "uf_plugin", text: str = GOOD) -> None:
    """An installed distribution as pip leaves it: its module and a dist-info with entry points."""
    info = site / "uf_plugin-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: uf-plugin\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(f"[ctsweep.families]\n{entry}\n")
    _module(site, module, text)


def test_an_entry_point_family_is_found_and_a_failing_one_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _distribution(tmp_path / "site", "plugged = uf_plugin:Tiny")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    assert get_model_class("plugged").__name__ == "Tiny"
    assert "entry point 'plugged' of uf-plugin 1.0" in user_families.source_of("plugged").origin
    (tmp_path / "p").mkdir()
    assert load_params(_project(tmp_path / "p", {}, ["cfc", "plugged"])).families == ["cfc", "plugged"]

    broken = tmp_path / "broken"
    _distribution(broken, "plugged2 = uf_plugin_gone:Tiny", module="uf_unused")
    monkeypatch.syspath_prepend(str(broken))
    with pytest.raises(ConfigError, match=r"family 'plugged2' \(entry point 'plugged2' of uf-plugin 1.0 .*"
                                          r"`import uf_plugin_gone` failed: ModuleNotFoundError"):
        load_params(tmp_path / "p" / "params.yaml")


def test_a_fresh_process_finds_the_declared_families_through_the_environment(tmp_path: Path) -> None:
    _module(tmp_path, "uf_env")
    load_params(_project(tmp_path, {"tiny": "uf_env:Tiny"}))
    env = {**os.environ, user_families.ENV: os.environ[user_families.ENV]}
    code = "from pipeline.models import get_model_class; print(get_model_class('tiny').__module__)"
    done = subprocess.run([sys.executable, "-c", code], cwd="/", env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and done.stdout.strip() == "uf_env", done.stderr[-2000:]


@pytest.mark.slow
def test_the_template_family_passes_check_family_as_written(tmp_path: Path) -> None:
    for name in ("params.yaml", "dvc.yaml"):  # the real ones, comments and all
        shutil.copy(REPO / name, tmp_path / name)
    written = new_family(tmp_path, "my-gru")
    assert [p.relative_to(tmp_path).as_posix() for p in written] == [
        "my_families/__init__.py", "my_families/my_gru.py", "search_spaces/my-gru.yaml",
        "tests/test_family_my_gru.py", "params.yaml", "dvc.yaml"]
    stages = yaml.safe_load((tmp_path / "dvc.yaml").read_text())["stages"]
    assert all(stages[s]["do"]["deps"][0] == "my_families" for s in ("search", "final"))
    assert stages["prepare"] == yaml.safe_load((REPO / "dvc.yaml").read_text())["stages"]["prepare"]
    assert new_family(tmp_path, "second")[-1].name == "params.yaml"  # dvc.yaml lists the package once
    text = (tmp_path / "params.yaml").read_text()
    assert text.startswith((REPO / "params.yaml").read_text())  # kept as it was, the entry added at the end
    assert yaml.safe_load(text)["user_families"]["my-gru"] == "my_families.my_gru:MyGru"
    result = CliRunner().invoke(app, ["check-family", "my-gru", "--root", str(tmp_path)])
    assert result.exit_code == 0, result.output
    lines = without_waiting_notice(result.output)
    assert [line.split()[0] for line in lines[:8]] == ["PASS"] * 8 and "8 of 8 checks passed" in lines[-1]
    assert lines[5] == "PASS  causality: largest change of an output up to step i when inputs after i change: 0"
    # The test it wrote runs and passes (in its own pytest, as the user would run it).
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_family_my_gru.py"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PYTHONPATH": str(tmp_path)})
    assert done.returncode == 0 and "1 passed" in done.stdout, done.stdout[-3000:]


def test_new_family_never_overwrites_and_refuses_built_in_names(tmp_path: Path) -> None:
    _project(tmp_path, {})
    (tmp_path / "search_spaces").mkdir()
    with pytest.raises(ConfigError, match="'cfc' is a built-in family"):
        new_family(tmp_path, "cfc")
    (tmp_path / "search_spaces" / "mine.yaml").write_text("kept\n")
    with pytest.raises(ConfigError, match=r"mine.yaml exists already; new-family never overwrites"):
        new_family(tmp_path, "mine")
    assert (tmp_path / "search_spaces" / "mine.yaml").read_text() == "kept\n"
    assert not (tmp_path / "my_families").exists()


LEAKY = GOOD.replace("class Tiny", "class Leaky").replace(
    "return out if self.per_step else gather_steps(out, last_valid_index(mask))",
    "return out if self.per_step else out[:, -1]  # reads the padding: wrong")
SHAPELESS = GOOD.replace("class Tiny", "class Shapeless").replace(
    "return out if self.per_step else gather_steps(out, last_valid_index(mask))", "return out")


@pytest.mark.slow
def test_check_family_names_each_broken_contract(tmp_path: Path) -> None:
    _module(tmp_path, "uf_broken", LEAKY + SHAPELESS)
    _project(tmp_path, {"leaky": "uf_broken:Leaky", "shapeless": "uf_broken:Shapeless"})
    load_params(tmp_path / "params.yaml")
    leaky = {c.name: c for c in check_family(tmp_path, "leaky")}
    assert not leaky["padding"].passed and "per-sequence output moves by" in leaky["padding"].detail
    assert leaky["training step"].passed and leaky["per-step output"].passed
    shapeless = {c.name: c for c in check_family(tmp_path, "shapeless")}
    assert not shapeless["per-sequence output"].passed
    assert "output shape (6, 10, 3); expected (6, 3)" in shapeless["per-sequence output"].detail
    result = CliRunner().invoke(app, ["check-family", "leaky", "--root", str(tmp_path)])
    assert result.exit_code == 1 and "FAIL  padding: series" in result.output
    missing = CliRunner().invoke(app, ["check-family", "nobody", "--root", str(tmp_path)])
    assert missing.exit_code == 2 and "unknown model 'nobody'" in missing.output and "`user_families`" in missing.output


@pytest.mark.parametrize("family", ["cfc", "ncde", "nrde", "cdr_nde_heat"])  # raw, interp, logsig, adaptive solver
def test_built_in_families_pass_check_family(family: str, project: Path) -> None:
    failed = [c.line() for c in check_family(project, family) if not c.passed]
    assert not failed, failed


def test_the_worked_example_shows_the_model_new_family_writes() -> None:
    from pipeline.families.template import MODEL

    shown = doc_blocks("## Bring your own data and model", "python")[1]
    written = MODEL.format(cls="MyGru", name="my_gru")
    assert shown.strip() == written[written.index("import torch"):].strip()
    assert len(shown.strip().splitlines()) <= 30  # the worked example calls it a 30-line model
