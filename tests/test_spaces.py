"""Search spaces: every family's file compiles, its reference lies inside, bad files fail loudly."""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest
import yaml

from pipeline.errors import ConfigError
from pipeline.models import MODELS
from pipeline.spaces import load_space, split_config
from tests.conftest import REPO

FAMILIES = sorted(MODELS)


@pytest.mark.parametrize("family", FAMILIES)
def test_every_family_has_a_valid_space(family: str) -> None:
    space = load_space(REPO / "search_spaces" / f"{family}.yaml")
    assert space.params["lr"].distribution == "loguniform"
    assert space.reference, "the paper's reference configuration must be given"


@pytest.mark.parametrize("family", FAMILIES)
def test_reference_is_enqueued_first_and_sampling_is_seeded(family: str) -> None:
    space = load_space(REPO / "search_spaces" / f"{family}.yaml")

    def proposals(seed: int) -> list[dict]:
        study = optuna.create_study(sampler=optuna.samplers.TPESampler(seed=seed, n_startup_trials=2))
        study.enqueue_trial(space.reference)
        out = []
        for _ in range(4):
            trial = study.ask()
            fixed = space.define_by_run()(trial)
            out.append({**trial.params, **fixed})
            study.tell(trial, 0.5)
        return out

    first = proposals(0)
    assert {k: first[0][k] for k in space.reference} == space.reference
    assert first == proposals(0)
    train, model = split_config(first[1])
    assert "lr" in train and "batch_size" in train and "lr" not in model


def _write(tmp_path: Path, family: str, edit) -> Path:
    raw = yaml.safe_load((REPO / "search_spaces" / f"{family}.yaml").read_text())
    edit(raw)
    path = tmp_path / f"{family}.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def test_unknown_model_key_names_file_and_allowed(tmp_path: Path) -> None:
    path = _write(tmp_path, "cfc", lambda r: r["fixed"]["default"].update(hiden_size=3))  # per-dataset `fixed`
    with pytest.raises(ConfigError) as err:
        load_space(path)
    assert str(path) in str(err.value) and "hiden_size" in str(err.value) and "backbone_units" in str(err.value)
    beside = _write(tmp_path, "cfc", lambda r: r["fixed"].update(hidden_size=3))  # a value among the datasets
    _refused(beside, "key `fixed.hidden_size`", "beside per-dataset entries; allowed: the value under `fixed.default`")


def test_an_error_in_an_anchored_reference_block_names_that_block(tmp_path: Path) -> None:
    """cfc.yaml's `xor_dense: *s1` repeats the `xor_event: &s1` block: an error in it names
    reference.xor_event, the block a user edits, not the alias (the datasets are checked in the
    file's order, and an error met first through an alias names the block it repeats)."""
    path = tmp_path / "cfc.yaml"
    path.write_text((REPO / "search_spaces" / "cfc.yaml").read_text().replace(
        "  xor_event: &s1  # Table S1\n", "  xor_event: &s1  # Table S1\n    bogus_key: 3\n", 1))
    with pytest.raises(ConfigError) as err:
        load_space(path)
    assert str(err.value) == (f"{path}: key `reference.xor_event`: ['bogus_key'] are not searched params (fixed values "
                              f"go under `fixed`)")


def test_an_alias_names_the_block_it_repeats() -> None:
    from pipeline.spaces.load import _anchor_of

    block = {"lr": 0.05}
    raw = {"default": {"lr": 0.01}, "xor_event": block, "xor_dense": block, "other": {"lr": 0.05}}
    assert _anchor_of(raw, "xor_dense") == "xor_event"
    assert _anchor_of(raw, "xor_event") is None and _anchor_of(raw, "other") is None  # equal is not the same block
    assert _anchor_of(raw, None) is None and _anchor_of({"lr": 0.1}, "x") is None


def test_learning_rate_must_be_loguniform(tmp_path: Path) -> None:
    path = _write(tmp_path, "ncde", lambda r: r["params"].update(lr={"distribution": "uniform", "low": 1e-4, "high": 1e-2}))
    with pytest.raises(ConfigError, match=r"params\.lr.*loguniform"):
        load_space(path)


def test_reference_outside_range(tmp_path: Path) -> None:
    path = _write(tmp_path, "ode_rnn", lambda r: r["reference"].update(lr=5.0))
    with pytest.raises(ConfigError, match=r"reference\.lr.*outside"):
        load_space(path)


def test_unknown_distribution(tmp_path: Path) -> None:
    path = _write(tmp_path, "ode_rnn", lambda r: r["params"].update(hidden_size={"distribution": "normal", "low": 1, "high": 2}))
    with pytest.raises(ConfigError, match=r"params\.hidden_size\.distribution.*categorical"):
        load_space(path)


def test_condition_on_later_param_is_rejected(tmp_path: Path) -> None:
    def edit(r: dict) -> None:
        r["params"] = {"lr": r["params"]["lr"], "rtol": {"distribution": "loguniform", "low": 1e-4, "high": 1e-2,
                                                         "when": {"method": "dopri5"}}, **r["params"]}

    with pytest.raises(ConfigError, match=r"params\.rtol\.when"):
        load_space(_write(tmp_path, "ode_rnn", edit))


def test_unknown_top_level_key(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="unknown top-level keys"):
        load_space(_write(tmp_path, "cfc", lambda r: r.update(constants={})))


# Strict parsing (issue 14): each case below used to pass silently or end in a traceback.

def _refused(path: Path, *fragments: str) -> str:
    """The ConfigError for the space at `path`: one line naming the file and every fragment."""
    with pytest.raises(ConfigError) as err:
        load_space(path)
    message = str(err.value)
    assert "\n" not in message and message.startswith(f"{path}:") and len(message) < 1500, message
    for fragment in fragments:
        assert fragment in message, (fragment, message)
    return message


@pytest.mark.parametrize("step", [0, -32, True, 1.5, "32", 7])
def test_step_must_be_a_positive_integer_dividing_the_range(tmp_path: Path, step) -> None:
    """`step: 0` used to end in ZeroDivisionError: integer modulo by zero."""
    path = _write(tmp_path, "cfc", lambda r: r["params"]["hidden_size"].update(step=step))
    _refused(path, "key `params.hidden_size.step`", "allowed: a positive integer that divides high - low (480)")


@pytest.mark.parametrize("log", ["false", "true", 1, None])
def test_log_must_be_a_real_bool(tmp_path: Path, log) -> None:
    """`log: 'false'` used to read as True."""
    path = _write(tmp_path, "cfc", lambda r: r["params"]["backbone_layers"].update(log=log))
    _refused(path, "key `params.backbone_layers.log`", "allowed: true or false")


def test_log_with_a_step_is_refused(tmp_path: Path) -> None:
    path = _write(tmp_path, "cfc", lambda r: r["params"]["hidden_size"].update(log=True))
    _refused(path, "params.hidden_size.log", "no step")


def test_log_without_a_step_is_sampled_log_scaled(tmp_path: Path) -> None:
    space = load_space(_write(tmp_path, "cfc", lambda r: r["params"]["backbone_layers"].update(log=True)))
    assert space.params["backbone_layers"].log is True


@pytest.mark.parametrize(("key", "edit"), [
    ("when", lambda r: r["params"]["rtol"].update(when=["method", "dopri5"])),
    ("params", lambda r: r.update(params=[{"lr": 1}])),
    ("fixed", lambda r: r.update(fixed=[{"batch_size": 32}])),
    ("reference", lambda r: r.update(reference=[r["reference"]])),
])
def test_sections_given_as_lists_are_one_line(tmp_path: Path, key: str, edit) -> None:
    _refused(_write(tmp_path, "ncde", edit), f"`{'params.rtol.when' if key == 'when' else key}`", "expected a mapping")


@pytest.mark.parametrize("batch_size", [0, -1, True, 1.5, "32", 10**7])
def test_fixed_batch_size_is_checked_before_any_trial(tmp_path: Path, batch_size) -> None:
    """A fixed `batch_size: 0` used to fail every trial a minute into the search."""
    path = _write(tmp_path, "ncde", lambda r: r["fixed"].update(batch_size=batch_size))
    _refused(path, "key `fixed.batch_size`", "allowed: an integer from 1 to 1000000")


@pytest.mark.parametrize(("key", "value", "allowed"), [
    ("grad_clip", -1.0, ">= 0"), ("grad_clip", float("nan"), ">= 0"), ("hidden_size", True, "an integer"),
    ("interpolation", 4, "a string"), ("vf_units", float("inf"), "an integer"), ("vf_layers", "3", "an integer"),
    ("rtol", float("inf"), "a finite number"), ("atol", True, "a finite number"),
])
def test_fixed_values_match_the_argument_they_become(tmp_path: Path, key: str, value, allowed: str) -> None:
    def edit(r: dict) -> None:
        r["params"].pop(key, None)
        r["reference"].pop(key, None)
        r["fixed"][key] = value

    _refused(_write(tmp_path, "ncde", edit), f"key `fixed.{key}`", allowed)


def test_choices_match_the_argument_they_become(tmp_path: Path) -> None:
    path = _write(tmp_path, "ncde", lambda r: r["params"]["interpolation"].update(choices=["cubic", 3]))
    _refused(path, "params.interpolation.choices", "3 is not allowed", "a string")
    path = _write(tmp_path, "ncde", lambda r: r["params"]["vf_layers"].update(distribution="uniform"))
    _refused(path, "params.vf_layers", "1.0 is not allowed", "an integer")  # uniform samples floats


@pytest.mark.parametrize("choices", [[], "cubic", [["cubic"]], ["cubic", "cubic"], [float("nan")], None])
def test_choices_are_a_non_empty_list_of_distinct_single_values(tmp_path: Path, choices) -> None:
    path = _write(tmp_path, "ncde", lambda r: r["params"]["interpolation"].update(choices=choices))
    _refused(path, "params.interpolation.choices")


@pytest.mark.parametrize(("bound", "value"), [("low", float("-inf")), ("high", float("inf")),
                                              ("high", float("nan")), ("low", True), ("high", "1e-2")])
def test_bounds_are_finite_numbers(tmp_path: Path, bound: str, value) -> None:
    path = _write(tmp_path, "ncde", lambda r: r["params"]["rtol"].update({bound: value}))
    _refused(path, "key `params.rtol`", "allowed: finite numbers with low < high")


def test_a_bool_reference_is_not_the_integer_one(tmp_path: Path) -> None:
    path = _write(tmp_path, "ncde", lambda r: r["reference"].update(vf_layers=True))
    _refused(path, "reference.vf_layers", "lies outside the space")


def test_when_names_an_earlier_param_and_its_values(tmp_path: Path) -> None:
    path = _write(tmp_path, "ncde", lambda r: r["params"]["rtol"].update(when={"method": []}))
    _refused(path, "params.rtol.when.method", "non-empty list")
    path = _write(tmp_path, "ncde", lambda r: r["params"]["rtol"].update(when={"method": "rk5"}))
    _refused(path, "params.rtol.when.method", "['rk5'] not allowed")


@pytest.mark.parametrize("stem", ["a.b", "-x", "1abc", "a b"])
def test_the_family_name_from_the_file_name_is_checked_first(tmp_path: Path, stem: str) -> None:
    path = tmp_path / f"{stem}.yaml"
    path.write_bytes(b"\x00 not even read")
    _refused(path, "the family name", "not a valid name")
    with pytest.raises(ConfigError, match="not a valid name"):
        load_space(REPO / "search_spaces" / "cfc.yaml", family="../cfc")


def test_duplicate_param_key_in_a_space(tmp_path: Path) -> None:
    path = tmp_path / "cfc.yaml"
    path.write_text((REPO / "search_spaces" / "cfc.yaml").read_text().replace(
        "params:\n", "params:\n  lr: {distribution: loguniform, low: 1.0e-5, high: 1.0}\n", 1))
    _refused(path, "key 'lr' given twice")


def test_huge_unknown_key_is_echoed_short(tmp_path: Path) -> None:
    message = _refused(_write(tmp_path, "cfc", lambda r: r["fixed"]["default"].update({"k" * 10_000: 1})), "unknown keys")
    assert "k" * 50 not in message
