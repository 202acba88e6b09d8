"""The floor under which the report shows no hyperparameter importance (pipeline.sweep.sensitivity
MIN_TRIALS), checked as benchmarks/rules/importance.py chose it: on a synthetic objective whose most
important key is known (the learning rate), fANOVA ranks it first in most of 20 searches of
MIN_TRIALS random trials, and not in most searches of 3, the floor it replaced."""

from __future__ import annotations

import sys
from pathlib import Path

import optuna

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # benchmarks/ is a folder of the repository, not an installed package
    sys.path.insert(0, str(ROOT))

from benchmarks.rules.importance import REQUIRED, minimum, share_first  # noqa: E402
from pipeline.reporting.tables import sensitivity_lines  # noqa: E402
from pipeline.sweep.sensitivity import MIN_TRIALS  # noqa: E402


def test_at_the_floor_fanova_finds_the_important_key_in_most_searches_and_below_it_not() -> None:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    assert share_first(MIN_TRIALS) >= REQUIRED
    assert share_first(3) < REQUIRED
    assert minimum({3: 9, 6: 16, 8: 14, 10: 17, 12: 18}) == 10  # every larger count must hold too
    assert minimum({3: 9, 6: 12}) is None


def _search(n_trials: int) -> dict:
    return {"optuna_study": "d/f/x", "importance": {
        "evaluator": "fanova", "complete": {"n_trials": n_trials, "values": {"lr": 0.8, "dropout": 0.2}, "reason": None}}}


def test_the_report_shows_an_importance_only_from_the_floor() -> None:
    shown = "\n".join(sensitivity_lines({"f": _search(MIN_TRIALS)}))
    assert f"| f | complete ({MIN_TRIALS}) | lr 0.80, dropout 0.20 | `d/f/x` |" in shown
    older = "\n".join(sensitivity_lines({"f": _search(3)}))  # a record computed under the old floor
    assert f"| f | complete (3) | not shown: 3 trials, at least {MIN_TRIALS} needed | `d/f/x` |" in older
