"""Issue 31, the search and final inputs once accepted without a word: each is refused with one
line before anything is written or Ray starts, or handled so that nothing the user had is lost.

Each refusal runs the installed `ctsweep` as a real process and asserts its exit status, that
stderr is exactly one line, and that every file of the project is byte for byte as before (none
created, none removed). The all-failed search and the late interrupt run a real search in this
process with a stand-in trial (no training: pipeline.sweep.search's `trial_fn`).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from pipeline.config import SearchParams, XorParams
from pipeline.data.contract import Dataset, save_dataset
from pipeline.data.kinds.xor import build as build_xor
from pipeline.errors import ConfigError, CtsweepError, TrialFailedError
from pipeline.runtime import interrupts
from pipeline.stores import tracking
from pipeline.stores.paths import processed_dir, search_result_path
from pipeline.sweep.context import TrialContext
from tests.conftest import default_params, write_params

CTSWEEP = Path(sys.executable).with_name("ctsweep")
D, F = "x", "cfc"


def _run(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("MLFLOW_TRACKING_URI", "PYTHONWARNINGS", "RAY_ADDRESS")}
    command = [str(CTSWEEP)] if CTSWEEP.exists() else [sys.executable, "-m", "pipeline.cli.app"]
    return subprocess.run([*command, *args, "--root", str(root)], capture_output=True, text=True, env=env,
                          timeout=300)


def _files(root: Path) -> dict[str, bytes | None]:
    """Every file and folder under the project by relative path (a folder: None), the stage locks
    and their folders included: a refused command leaves none behind."""
    return {p.relative_to(root).as_posix(): p.read_bytes() if p.is_file() else None for p in sorted(root.rglob("*"))}


def _params(**changes: dict) -> dict:
    raw = default_params()
    raw.update(datasets=[D], families=[F], prepare={D: {"kind": "xor", "n_train": 300, "n_test": 40, "seed": 3}})
    raw["search"].update(num_samples=2, epochs=2, n_startup_trials=1, asha={"grace_period": 1})
    for section, values in changes.items():
        raw[section].update(values)
    return raw


@pytest.fixture
def tiny(project: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The project with params for dataset `x` (270 train, 30 validation, 40 test series: no batch of
    cfc's space is clipped), prepared, and an earlier search result for cfc that no refusal may touch."""
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    write_params(project, _params())
    save_dataset(processed_dir(project, D), build_xor(D, XorParams(kind="xor", n_train=300, n_test=40, seed=3)))
    out = search_result_path(project, D, F)
    out.parent.mkdir(parents=True)
    out.write_text(json.dumps(_good_record()) + "\n")
    return project


def _good_record() -> dict:
    return {"dataset": D, "family": F, "status": "ok", "metric": "accuracy", "mode": "max",
            "best_config": {"lr": 0.01, "batch_size": 32, "hidden_size": 64}, "best_val": 0.9, "trial_seed": 1000,
            "n_trials": 2, "n_failed": 0, "note": "an earlier search's complete result"}


def _refused(root: Path, *args: str) -> str:
    """Run `ctsweep ARGS`; assert exit 2, one line on stderr and no file changed; return the line."""
    before = _files(root)
    done = _run(root, *args)
    assert done.returncode == 2, done.stderr[-3000:]
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("ctsweep: error: "), done.stderr[-3000:]
    assert _files(root) == before  # nothing written, created or removed
    return lines[0]


# ----------------------------------------------------------------------------- params.yaml


def test_a_trial_time_limit_under_a_second_is_refused(tiny: Path) -> None:
    write_params(tiny, _params(search={"trial_time_limit_s": 0.001}))
    line = _refused(tiny, "search", D, F)
    assert line.startswith(f"ctsweep: error: {tiny / 'params.yaml'}: key `search.trial_time_limit_s`: 0.001 s cannot "
                           f"hold a trial's first epoch; allowed: at least 1 s, or null for no limit"), line


@pytest.mark.parametrize("command", [("classical", D), ("check",)])
def test_a_classical_time_limit_under_a_second_is_refused_at_load(tiny: Path, command: tuple) -> None:
    """Issue 73, item 7: 0.001 s was accepted and failed the classifier later, while the search
    refused a trial limit under 1 s at load."""
    write_params(tiny, _params(classical={"time_limit_s": 0.001}))
    line = _refused(tiny, *command)
    assert line == (f"ctsweep: error: {tiny / 'params.yaml'}: key `classical.time_limit_s`: Input should be greater "
                    f"than or equal to 1 (got 0.001)"), line


def test_a_trial_time_limit_below_one_measured_epoch_is_refused_before_ray(tiny: Path) -> None:
    # min_steps makes one epoch of the reference tens of thousands of optimiser steps: far beyond 1 s
    write_params(tiny, _params(search={"trial_time_limit_s": 1, "min_steps": 1_000_000}))
    line = _refused(tiny, "search", D, F)
    assert line.startswith(f"ctsweep: error: params.yaml: key `search.trial_time_limit_s`: 1 s cannot hold one epoch "
                           f"of {D}/{F}: at its reference configuration one optimiser step took "), line
    assert "one optimiser step took" in line and "allowed: at least" in line, line
    assert not (tiny / "mlflow.db").exists() and not (tiny / "ray_results").exists()


@pytest.mark.parametrize(("stage", "resources", "asked"), [
    ("search", {"gpu": 1}, "cpu=1, gpu=1"),
    ("search", {"cpu": 64}, "cpu=64, gpu=0"),
    ("final", {"cpu": 64}, "cpu=64, gpu=0"),
])
def test_resources_this_machine_cannot_meet_are_refused_before_ray_starts(tiny: Path, stage: str, resources: dict,
                                                                         asked: str) -> None:
    """A local instance's resources are this machine's: known before Ray starts (it took about a
    minute and three lines, Ray's start-up included)."""
    write_params(tiny, _params(**{stage: {"resources": resources}}))
    started = time.monotonic()
    line = _refused(tiny, stage, D, F)
    cpus = os.cpu_count()
    assert line == (f"ctsweep: error: params.yaml: `{stage}.resources` asks for {asked}, which this machine cannot "
                    f"provide to the local Ray instance the command starts (it has CPU={cpus}, GPU=0). Lower the "
                    f"request, or set RAY_ADDRESS to a cluster that has it."), line
    assert time.monotonic() - started < 60


def test_check_runs_the_search_s_corner_check_on_the_prepared_dataset(tiny: Path) -> None:
    """`ctsweep check` refuses what `ctsweep search` would refuse before any trial, in the same line."""
    done = _run(tiny, "check")
    assert done.returncode == 0 and "checked on the 1 prepared dataset(s) as the search checks them" in done.stdout
    write_params(tiny, _params(search={"fixed": {F: {"hidden_size": -32}}}))
    checked = _refused(tiny, "check")
    assert checked == _refused(tiny, "search", D, F)
    assert "key `hidden_size`: -32 is refused by CfC" in checked, checked


def test_lr_factors_outside_a_decade_are_refused(tiny: Path) -> None:
    write_params(tiny, _params(final={"lr_factors": [1.0e-300]}))
    line = _refused(tiny, "final", D, F)
    assert line == (f"ctsweep: error: {tiny / 'params.yaml'}: key `final`: lr_factors [1e-300] lie outside [0.1, 10]; "
                    f"allowed: factors from 0.1 to 10 other than 1 (a robustness rerun changes the learning rate a "
                    f"little; beyond a decade either way it is another configuration, which the search covers)")


def test_a_dataset_of_11_sequences_is_refused_before_prepare_writes(tiny: Path) -> None:
    raw = _params()
    raw["prepare"][D].update(n_train=11)
    write_params(tiny, raw)
    line = _refused(tiny, "prepare", D)
    assert line.startswith(f"ctsweep: error: {tiny / 'params.yaml'}: key `prepare.{D}.n_train`: 11 with val_fraction "
                           f"0.1 leaves 9 training and 2 validation series; allowed: at least 10 of each "
                           f"(n_train >= 91 at val_fraction 0.1)"), line


def test_a_truncated_raw_lock_is_named_with_the_command_that_rebuilds_it(tiny: Path) -> None:
    lock = tiny / "data" / "raw.lock"
    lock.write_text('{"https://example.org/a.zip": {"sha256": "ab')
    line = _refused(tiny, "search", D, F)
    assert line == (f"ctsweep: error: {lock} is corrupt (truncated JSON at line 1); restore it with `git checkout -- "
                    f"{lock}`, or delete it and rerun `ctsweep fetch {D}` to record the checksums again"), line


# ----------------------------------------------------------------------------- the project's own folders


@pytest.mark.parametrize(("command", "args"), [
    ("search", (D, F)), ("final", (D, F)), ("report", ()), ("classical", (D,)), ("promote", ()),
])
def test_a_file_where_the_log_folder_goes_is_one_line_before_ray(tiny: Path, command: str, args: tuple) -> None:
    """Issue 73, item 1: a file `.ctsweep/logs` (a `touch`, a bad copy) passed every check and
    then, at the first log line after Ray had started, was a FileExistsError traceback, exit 1."""
    logs = tiny / ".ctsweep" / "logs"
    logs.parent.mkdir()
    logs.write_text("a user's file\n")
    line = _refused(tiny, command, *args)
    assert line == (f"ctsweep: error: {logs} is a file, not a folder: ctsweep keeps the log of `ctsweep {command}` "
                    f"in {logs}; move the file away, then run this again"), line
    assert logs.read_text() == "a user's file\n"


def test_a_file_where_the_ctsweep_folder_goes_is_one_line_too(tiny: Path) -> None:
    (tiny / ".ctsweep").write_text("")
    line = _refused(tiny, "search", D, F)
    assert line == (f"ctsweep: error: {tiny / '.ctsweep'} is a file, not a folder: ctsweep keeps the log of `ctsweep "
                    f"search` in {tiny / '.ctsweep' / 'logs'}; move the file away, then run this again"), line


def test_tune_s_restore_advice_goes_to_the_log_not_the_terminal(tmp_path: Path) -> None:
    """Tune's driver logs "Resume experiment with: Tuner.restore(...)" on every interrupted
    search; a ctsweep user resumes with the same command, so the line is in the log only. Tune's
    errors still reach the terminal."""
    code = (
        "import logging, sys; from pathlib import Path; from pipeline.runtime.output import quiet_libraries;"
        f"quiet_libraries(Path({str(tmp_path)!r}), 'search');"
        "log = logging.getLogger('ray.tune.tune');"
        "log.warning('Experiment has been interrupted, but the most recent state was saved.\\n'"
        "            'Resume experiment with: Tuner.restore(path=\"/x\", trainable=...)');"
        "log.error('Trials did not complete: [t0]')")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "Tuner.restore" not in done.stderr and "Trials did not complete" in done.stderr
    assert "Tuner.restore" in (tmp_path / ".ctsweep" / "logs" / "ctsweep-search.log").read_text()


@pytest.mark.parametrize(("command", "args"), [("search", (D, F)), ("final", (D, F)), ("report", ()),
                                                ("classical", (D,))])
def test_a_prepared_dataset_without_its_digest_is_refused_as_unverified(tiny: Path, command: str,
                                                                         args: tuple) -> None:
    """Issue 73, item 2: without digest.json nothing was checked, and a search ran on changed data
    and replaced the earlier result; now the data is unverified until prepared again."""
    folder = processed_dir(tiny, D)
    (folder / "digest.json").unlink()
    line = _refused(tiny, command, *args)
    assert line == (f"ctsweep: error: {folder / 'digest.json'} does not exist, so the prepared data in {folder} cannot "
                    f"be verified (prepared by a ctsweep before digest.json, or the file was removed: its arrays may "
                    f"have changed since); run `ctsweep prepare {D}` (or `dvc repro`) again, which writes it"), line


# ----------------------------------------------------------------------------- search spaces


def test_a_negative_hidden_size_in_the_reference_is_refused_by_the_model(tiny: Path) -> None:
    space = tiny / "search_spaces" / "cfc.yaml"
    text = space.read_text().replace("  hidden_size: {distribution: int, low: 32,",
                                     "  hidden_size: {distribution: int, low: -32,")
    text = text.replace("    hidden_size: 448\n", "    hidden_size: -32\n")  # the default reference
    space.write_text(text)
    line = _refused(tiny, "search", D, F)
    assert line.startswith(f"ctsweep: error: {space}: key `reference.hidden_size`: -32 is refused by CfC ("), line
    assert "-32" in line.split("is refused by CfC (", 1)[1], line  # the model's own words name the value
    assert line.endswith(f"allowed: values it can be built with (checked at the reference and the corners of the "
                         f"space on {D}, before any trial)"), line


def _plan(root: Path, p: SearchParams):
    from pipeline.data.contract import load_meta
    from pipeline.sweep.plans import plan_family

    return plan_family(root, D, F, p, load_meta(processed_dir(root, D)), processed_dir(root, D))


def test_a_corner_the_model_refuses_names_the_range(tiny: Path) -> None:
    space = tiny / "search_spaces" / "cfc.yaml"
    space.write_text(space.read_text().replace("  backbone_units: {distribution: int, low: 32,",
                                               "  backbone_units: {distribution: int, low: -32,"))
    with pytest.raises(ConfigError) as caught:
        _plan(tiny, SearchParams())
    assert str(caught.value).startswith(f"{space}: key `params.backbone_units`: -32 is refused by CfC (")
    assert "\n" not in str(caught.value)


def test_a_value_fixed_by_params_yaml_is_checked_too(tiny: Path) -> None:
    with pytest.raises(ConfigError, match=r"^params\.yaml search\.fixed\.cfc: key `hidden_size`: -32 is refused by "):
        _plan(tiny, SearchParams(fixed={F: {"hidden_size": -32}}))


def test_every_shipped_space_passes_its_corner_check_on_the_default_dataset(tiny: Path) -> None:
    plan = _plan(tiny, SearchParams())  # raises if cfc's own space were refused
    assert plan.family == F


def test_a_patience_longer_than_the_search_says_so_and_final_refuses_it(tiny: Path) -> None:
    space = tiny / "search_spaces" / "cfc.yaml"
    space.write_text(space.read_text().replace("fixed:\n  default: {}\n", "fixed:\n  default: {patience: 1000}\n"))
    plan = _plan(tiny, SearchParams(epochs=2, asha={"grace_period": 1}))
    [note] = [line for line in plan.notes if "patience" in line]  # printed once every check has passed
    assert note == (f"ctsweep: search: {F}: patience 1000 ({space}) is more than search.epochs (2): it never stops a "
                    f"trial of this search; the final stage applies it, and refuses it above final.epochs")
    out = search_result_path(tiny, D, F)
    out.write_text(json.dumps({**_good_record(), "best_config": {**_good_record()["best_config"], "patience": 1000}}))
    line = _refused(tiny, "final", D, F)
    assert line == (f"ctsweep: error: results/{D}/search/{F}.json: best_config `patience` 1000 is more than the run's "
                    f"100 epochs, so it could never stop it; allowed: 0 to 100 (0: no early stopping) (the final stage "
                    f"trains {F} for 100 epochs: params.yaml `final.epochs` or `final.family_epochs`)"), line


def test_a_patience_beyond_any_stage_is_refused_at_load(tmp_path: Path) -> None:
    from pipeline.spaces import load_space
    from tests.conftest import REPO

    space = tmp_path / "cfc.yaml"
    space.write_text((REPO / "search_spaces" / "cfc.yaml").read_text().replace(
        "fixed:\n  default: {}\n", "fixed:\n  default: {patience: 1000000}\n"))
    with pytest.raises(ConfigError, match=r"key `fixed.patience`: 1000000 is not allowed; allowed: an integer from 0 "
                                          r"to 100000"):
        load_space(space)


def test_a_small_validation_split_is_one_warning() -> None:
    from pipeline.data.contract import Meta
    from pipeline.sweep.search import _small_splits

    assert _small_splits("tiny", Meta(name="tiny", task="binary", per_step=False, output_size=1, metric="auroc",
                                      channels=["a"], source="t", sizes={"train": 30, "val": 4, "test": 12})) == [
        "ctsweep: search: warning: tiny has only 4 val series: a score over fewer than 10 moves by more than 10 "
        "points with one series (prepare more, or final.validation: per_seed)"]


def test_a_refusal_after_a_notice_is_its_own_line_alone(tiny: Path) -> None:
    """A value fixed by params.yaml is a notice ("fixed by params.yaml search.fixed"), and a value the
    model refuses an error: the refusal comes alone, the notice is printed only once every check
    has passed (pipeline.sweep.plans FamilyPlan.notes)."""
    write_params(tiny, _params(search={"fixed": {F: {"hidden_size": -32}}}))
    line = _refused(tiny, "search", D, F)
    assert line.startswith("ctsweep: error: params.yaml search.fixed.cfc: key `hidden_size`: -32 is refused by CfC ("
                           "ValueError: hidden_size must be > 0, got -32); allowed: "), line


# ----------------------------------------------------------------------------- real searches


def failing_trial(config: dict, ctx: TrialContext, data: Dataset) -> None:
    """A stand-in trial whose loss turns non-finite at once: its real MLflow run ends FAILED."""
    from ray import tune

    from pipeline.sweep.trial import _fail, trial_run

    client = tracking.MlflowClient(ctx.tracking_uri)
    run_id = trial_run(client, ctx, tune.get_context().get_trial_id(), config)
    error = TrialFailedError("non-finite training loss nan at epoch 1")
    _fail(client, run_id, error)
    raise error


def good_trial(config: dict, ctx: TrialContext, data: Dataset) -> None:
    """A stand-in trial reporting one epoch of validation accuracy 0.9."""
    import tempfile

    from ray import tune

    from pipeline.sweep.trial import trial_run

    client = tracking.MlflowClient(ctx.tracking_uri)
    run_id = trial_run(client, ctx, tune.get_context().get_trial_id(), config)
    tracking.log_metrics(client, run_id, {"val_metric": 0.9}, step=1)
    with tempfile.TemporaryDirectory() as folder:
        Path(folder, "state.json").write_text("{}")
        tune.report({"epoch": 1, "val_metric": 0.9, "mlflow_run_id": run_id},
                    checkpoint=tune.Checkpoint.from_directory(folder))


@pytest.fixture
def by_value():
    """Ray workers cannot import this test module: its stand-in trials travel by value."""
    from ray import cloudpickle

    module = sys.modules[failing_trial.__module__]
    cloudpickle.register_pickle_by_value(module)
    yield
    cloudpickle.unregister_pickle_by_value(module)


P = SearchParams(num_samples=2, max_concurrent=2, epochs=1, n_startup_trials=1, max_failures=0,
                 asha={"grace_period": 1})


def _parent(root: Path):
    client = tracking.MlflowClient(f"sqlite:///{root / 'mlflow.db'}")
    exp = client.get_experiment_by_name(f"ctsweep/{D}")
    runs = client.search_runs([exp.experiment_id])
    [parent] = [r for r in runs if tracking.PARENT_TAG not in r.data.tags]
    assert not [r for r in runs if r.info.status == "RUNNING"]
    return parent


@pytest.mark.slow
def test_a_search_whose_every_trial_failed_never_replaces_a_good_result(tiny: Path, by_value, local_ray: None,
                                                                        capfd: pytest.CaptureFixture[str],
                                                                        caplog: pytest.LogCaptureFixture,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    from pipeline.sweep.failure_lines import SWITCH
    from pipeline.sweep.parents import ALL_FAILED_TAG
    from pipeline.sweep.search import SearchFailedError, search

    monkeypatch.delenv(SWITCH, raising=False)  # the search sets Tune's switch itself (restored after the test)
    out = search_result_path(tiny, D, F)
    previous = out.read_bytes()
    capfd.readouterr()
    with pytest.raises(SearchFailedError) as caught:
        search(tiny, D, F, P, trial_fn=failing_trial)
    err = capfd.readouterr().err
    # one line per failed trial, naming its traceback's file; Tune printed no traceback of its own
    lines = [line for line in err.splitlines() if " failed: " in line and line.startswith("ctsweep: search: ")]
    assert len(lines) == 2, err
    for line in lines:
        assert line.startswith(f"ctsweep: search: {F} trial ") and "TrialFailedError: non-finite training loss nan" in line
        assert (tiny / line.rsplit("; traceback: ", 1)[1]).is_file()  # relative to the project
    assert "Traceback (most recent call last)" not in err and "Trial task failed" not in err
    assert not [r for r in caplog.records if "Trial task failed" in r.getMessage()]  # not even to the log
    message = str(caught.value)
    assert isinstance(caught.value, CtsweepError) and "\n" not in message  # the CLI's one line, exit status 2
    assert message == (f"{D}/{F}: all 2 trials of this search failed (non-finite training loss nan at epoch 1 "
                       f"(2 trials)); the earlier result results/{D}/search/{F}.json is kept and this search was "
                       f"written beside it to results/{D}/search/{F}.failed.json: fix the cause and search again, or "
                       f"move the failed search over the earlier result to record {F} as failed.")
    assert out.read_bytes() == previous  # the good result, byte for byte
    failed = json.loads(out.with_name(f"{F}.failed.json").read_text())
    assert (failed["status"], failed["n_trials"], failed["n_failed"], failed["best_config"]) == ("failed", 2, 2, None)
    parent = _parent(tiny)
    assert parent.info.status == "FAILED" and parent.data.tags[ALL_FAILED_TAG] == "true"
    assert parent.info.run_id == failed["mlflow_parent_run_id"]


@pytest.mark.slow
def test_an_interrupt_just_after_the_result_was_written_says_so(tiny: Path, by_value,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """SIGINT lands right after the result file is written: the search is complete, so its parent
    run ends FINISHED, and the message names the file instead of claiming nothing changed."""
    import pipeline.sweep.search as stage
    from pipeline.sweep.parents import COMPLETE_TAG

    real = stage.write_json

    def write_then_interrupt(path: Path, data: dict) -> None:
        real(path, data)
        os.kill(os.getpid(), signal.SIGINT)

    monkeypatch.setattr(stage, "write_json", write_then_interrupt)
    with pytest.raises(interrupts.Interrupted) as caught, interrupts.handle_signals():
        stage.search(tiny, D, F, P, trial_fn=good_trial)
    record = json.loads(search_result_path(tiny, D, F).read_text())
    assert record["status"] == "ok" and record["n_trials"] == 2  # the new, complete result
    parent = _parent(tiny)
    assert parent.info.status == "FINISHED" and parent.data.tags[COMPLETE_TAG] == "true"
    assert interrupts.stop_message(caught.value) == (
        f"interrupted by SIGINT: stopped after writing results/{D}/search/{F}.json ({F}: search complete, MLflow "
        f"parent run FINISHED) in full; anything else earlier runs wrote is unchanged and nothing half-written was "
        f"left")


def test_the_command_line_prints_what_was_written_before_the_interrupt(capsys: pytest.CaptureFixture[str]) -> None:
    import typer

    from pipeline.cli.app import _stage

    @_stage
    def stage(written: bool) -> None:
        if written:
            interrupts.wrote("results/x/search/cfc.json", "cfc: search complete")
        raise interrupts.Interrupted(signal.SIGINT)

    for written, said in ((False, "stopped; what earlier runs wrote is unchanged and nothing half-written was left; "
                                  "run the same command again to resume"),
                          (True, "stopped after writing results/x/search/cfc.json (cfc: search complete) in full; "
                                 "anything else earlier runs wrote is unchanged and nothing half-written was left")):
        with pytest.raises(typer.Exit) as caught:
            stage(written)
        assert caught.value.exit_code == 130
        assert capsys.readouterr().err.splitlines() == [f"ctsweep: interrupted by SIGINT: {said}"]


def test_the_default_params_pass_every_new_bound() -> None:
    from pipeline.config import load_params
    from tests.conftest import REPO

    params = load_params(REPO / "params.yaml")
    assert params.search.trial_time_limit_s == 900 and params.final.lr_factors == []
    assert yaml.safe_load((REPO / "params.yaml").read_text())["prepare"]["xor_event"]["n_train"] >= 91
