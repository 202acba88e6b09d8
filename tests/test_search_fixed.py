"""`search.fixed`: a run fixes a family's values over its space (a paper's protocol for a baseline).

The spaces are the project's own files; the search test runs a real local Ray with Optuna.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.config import SearchParams, XorParams
from pipeline.config.params import params_from
from pipeline.data.contract import save_dataset
from pipeline.data.kinds.xor import build as build_xor
from pipeline.errors import ConfigError
from pipeline.spaces import fix_values, load_space, space_path
from pipeline.stores.paths import processed_dir
from pipeline.sweep.plans import search_fingerprint
from pipeline.sweep.search import search

ROOT = Path(__file__).resolve().parents[1]


def cfc_space():
    return load_space(space_path(ROOT, "cfc"), "cfc").for_dataset("japanese_vowels")


def test_a_fixed_value_leaves_the_search_and_decides_the_conditions_on_it() -> None:
    space = cfc_space()
    assert space.params["lr_decay"].when == {"lr_schedule": ("exponential",)}
    fixed, note = fix_values(space, {"lr_schedule": "exponential", "optimizer": "rmsprop", "lr": 0.005})
    assert not {"lr_schedule", "optimizer", "lr"} & (set(fixed.params) | set(fixed.reference))
    assert fixed.fixed == {**space.fixed, "lr_schedule": "exponential", "optimizer": "rmsprop", "lr": 0.005}
    assert fixed.params["lr_decay"].when == {} and fixed.reference["lr_decay"] == space.reference["lr_decay"]
    assert note == "cfc: lr_schedule exponential, optimizer rmsprop, lr 0.005 fixed by params.yaml search.fixed (not searched)"
    never, _ = fix_values(space, {"lr_schedule": "none"})  # lr_decay's condition fails: never searched
    assert "lr_decay" not in never.params and "lr_decay" not in never.reference
    assert fix_values(space, {}) == (space, None)


@pytest.mark.parametrize("values, message", [
    ({"hidden_sise": 64}, r"params.yaml search.fixed.cfc: unknown keys \['hidden_sise'\]; allowed: training keys"),
    ({"optimizer": "rmsprpo"}, r"params.yaml search.fixed.cfc: key `optimizer`: 'rmsprpo' is not allowed; allowed: one of"),
])
def test_a_fixed_value_the_family_cannot_take_is_one_line(values: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        fix_values(cfc_space(), values)


def test_params_name_only_known_families(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"search.fixed.*unknown families \['cfx'\]"):
        params_from({"datasets": ["d"], "families": ["cfc"], "prepare": {"d": {"kind": "xor"}},
                     "search": {"fixed": {"cfx": {"lr": 0.1}}}}, tmp_path / "params.yaml")


def test_a_family_s_fingerprint_changes_with_its_own_fixed_values_only(tmp_path: Path) -> None:
    data = tmp_path / "data"
    save_dataset(data, build_xor("d", XorParams(kind="xor", n_train=20, n_test=10, seed=1)))
    space = space_path(ROOT, "cfc")

    def fp(fixed: dict) -> str:
        return search_fingerprint("d", "cfc", SearchParams(fixed=fixed), space, data)

    assert fp({}) == fp({"ode_rnn": {"lr": 0.1}}) != fp({"cfc": {"lr": 0.1}})


@pytest.mark.slow
def test_every_trial_trains_with_the_fixed_values(project: Path, monkeypatch: pytest.MonkeyPatch, local_ray: None) -> None:
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    save_dataset(processed_dir(project, "xor_event"), build_xor("xor_event", XorParams(kind="xor", n_train=60,
                                                                                          n_test=20, seed=3)))
    fixed = {"optimizer": "rmsprop", "batch_size": 16, "hidden_size": 8}
    p = SearchParams(num_samples=2, max_concurrent=2, epochs=1, n_startup_trials=2, asha={"grace_period": 1},
                     fixed={"cfc": fixed})
    record = search(project, "xor_event", "cfc", p)
    assert len(record["trials"]) == 2 and all(t["status"] == "ok" for t in record["trials"])
    assert all(t["config"][k] == v for t in record["trials"] for k, v in fixed.items())
    assert not set(fixed) & set(record["space"])  # not searched
