"""The search gain (pipeline.reporting.search_gain): the best trial's validation score minus the
reference configuration's (trial 0), by hand on small search records, and where it is "n/a"."""

from __future__ import annotations

import pytest

from pipeline.reporting.search_gain import search_gain


def _trial(number: int, best_val: float | None, epochs: int = 4, status: str = "ok", repeat: int = 0) -> dict:
    return {"number": number, "repeat": repeat, "best_val": best_val, "epochs": epochs, "status": status}


def _search(trials: list[dict], best_trial: int, best_val: float, reference: dict | None = None) -> dict:
    return {"status": "ok", "reference": {"lr": 1e-3} if reference is None else reference, "trials": trials,
            "best_trial": best_trial, "best_val": best_val}


def test_the_gain_is_the_best_trial_s_score_minus_the_reference_s() -> None:
    record = _search([_trial(0, 0.70), _trial(1, 0.80), _trial(2, 0.75)], best_trial=1, best_val=0.80)
    gain = search_gain(record, "max")
    assert gain.value == pytest.approx(0.10) and gain.cell("accuracy") == "+10.00"
    # lower is better (mse): the reference's 0.5 against the best's 0.3 is a gain of 0.2
    mse = _search([_trial(0, 0.5), _trial(1, 0.3)], best_trial=1, best_val=0.3)
    assert search_gain(mse, "min").value == pytest.approx(0.2) and search_gain(mse, "min").cell("mse") == "+0.2000"
    # the reference is the best: no gain
    assert search_gain(_search([_trial(0, 0.9), _trial(1, 0.8)], best_trial=0, best_val=0.9), "max").value == 0


def test_repeats_give_the_mean_of_their_gains() -> None:
    trials = [_trial(0, 0.6), _trial(1, 0.7), _trial(0, 0.5, repeat=1), _trial(1, 0.8, repeat=1)]
    record = {**_search(trials, 1, 0.8), "repeats": [{"repeat": 0, "status": "ok", "best_trial": 1, "best_val": 0.7},
                                                     {"repeat": 1, "status": "ok", "best_trial": 1, "best_val": 0.8}]}
    assert search_gain(record, "max").value == pytest.approx((0.1 + 0.3) / 2)


def test_unequal_budgets_a_failed_reference_or_none_at_all_are_not_compared() -> None:
    stopped = _search([_trial(0, 0.6, epochs=1), _trial(1, 0.8, epochs=4)], best_trial=1, best_val=0.8)
    assert search_gain(stopped, "max").cell("accuracy") == (
        "n/a (ASHA stopped the reference after 1 of the best trial's 4 epochs)")
    failed = _search([_trial(0, None, status="error"), _trial(1, 0.8)], best_trial=1, best_val=0.8)
    assert search_gain(failed, "max").why_not == "the reference trial failed"
    assert search_gain({**failed, "reference": None}, "max").why_not == "no reference configuration"
    older = {k: v for k, v in failed.items() if k != "reference"}  # a record from before references were kept
    assert search_gain(older, "max").cell("accuracy") == "n/a (no reference configuration)"
    assert search_gain(None, "max").value is None
