"""The record specs a stage checks when it reads an earlier stage's JSON: a search record is
"ok" (a best configuration, maybe its space) or "failed" (reasons, no configuration), and a
reader gets one line naming the field that does not fit."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipeline.errors import CorruptInputError
from pipeline.stores.schema import SEARCH_FOR_FINAL, SEARCH_FOR_REPORT, Switch, problem, read_record

OK = {"dataset": "x", "family": "cfc", "metric": "accuracy", "mode": "max", "status": "ok",
      "best_config": {"lr": 0.01, "hidden_size": 32}, "best_val": 0.9, "trial_seed": 1000, "n_trials": 4, "n_failed": 1,
      "space": {"lr": {"type": "float", "low": 1e-4, "high": 0.1, "log": True},
                "hidden_size": {"type": "int", "low": 16, "high": 64, "log": False, "step": 16},
                "solver": {"type": "categorical", "choices": ["rk4", "dopri5", None]}},
      "trials": [{"config": {"lr": 0.01}, "best_val": 0.9}]}
FAILED = {"dataset": "x", "family": "ncde", "metric": "accuracy", "mode": "max", "status": "failed",
          "best_config": None, "best_val": None, "trial_seed": 1000, "n_trials": 2, "n_failed": 2,
          "errors": ["first epoch exceeded the trial time limit of 0.001 s (search.family_time_limit_s.ncde) "
                     "(2 trials)"],
          "trials": [{"config": {"lr": 0.01}, "best_val": None}]}


def _without(record: dict, *keys: str) -> dict:
    return {k: v for k, v in record.items() if k not in keys}


@pytest.mark.parametrize("record", [OK, FAILED, _without(OK, "status", "space")], ids=["ok", "failed", "older"])
def test_the_final_stage_reads_ok_failed_and_older_search_records(record: dict) -> None:
    assert problem(record, SEARCH_FOR_FINAL) is None


@pytest.mark.parametrize(("record", "why"), [
    (_without(FAILED, "errors"), "missing key 'errors'"),
    ({**FAILED, "best_config": {"lr": 0.1}}, "best_config is an object, expected null"),
    ({**OK, "best_config": None}, "best_config is null, expected an object"),  # an ok record needs its config
    ({**OK, "status": "faild"}, "status is 'faild', expected one of ['ok', 'failed']"),
    ({**OK, "space": {"lr": {"type": "float", "low": 1e-4, "log": True}}}, "missing key 'space.lr.high'"),
    ({**OK, "space": {"solver": {"type": "categorical", "choices": []}}}, "space.solver.choices has 0 items"),
    ({**OK, "space": {"lr": {"type": "beta", "low": 0, "high": 1, "log": False}}}, "space.lr.type is 'beta'"),
], ids=["failed-without-errors", "failed-with-config", "ok-without-config", "bad-status", "space-without-high",
        "no-choices", "unknown-type"])
def test_a_search_record_that_does_not_fit_its_status_names_the_field(record: dict, why: str) -> None:
    assert why in (problem(record, SEARCH_FOR_FINAL) or "")


def test_the_report_reads_a_search_record_with_its_status_and_space() -> None:
    assert problem(OK, SEARCH_FOR_REPORT) is None
    assert "space.lr" in problem({**OK, "space": {"lr": 1}}, SEARCH_FOR_REPORT)


def test_a_switch_on_a_non_object_or_an_unhashable_tag_reports_instead_of_raising() -> None:
    spec = Switch("status", {"failed": {"errors": list}}, {"best": int})
    assert problem([], spec) == "the file is a list, expected an object"
    assert problem({"status": ["failed"], "best": 1}, spec) is None  # no case: the default spec
    assert problem({"status": "failed"}, spec) == "missing key 'errors'"


def test_read_record_names_the_file_the_field_and_the_command(tmp_path: Path) -> None:
    path = tmp_path / "ncde.json"
    path.write_text(json.dumps(_without(FAILED, "errors")))
    with pytest.raises(CorruptInputError, match=r"ncde\.json.*missing key 'errors'.*ctsweep search x ncde"):
        read_record(path, "ctsweep search x ncde", SEARCH_FOR_FINAL)
    path.write_text(json.dumps(FAILED))
    assert read_record(path, "ctsweep search x ncde", SEARCH_FOR_FINAL)["status"] == "failed"
