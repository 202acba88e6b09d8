"""benchmarks/rules/selection_rule.py: its k-fold datasets (every training and validation series held
out once, never the prepared folder's cached inputs) and its analysis on hand-made trials."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.rules.selection_rule import KFOLD, RULES, analyse, folds
from pipeline.config import XorParams
from pipeline.data.kinds.xor import build as build_xor
from tests.test_resplit import _ids


def test_folds_hold_out_every_series_once_and_leave_the_prepared_folder(tmp_path: Path) -> None:
    data = dataclasses.replace(build_xor("x", XorParams(kind="xor", n_train=60, n_test=20, seed=3)), folder=tmp_path)
    pool = _ids(data.splits["train"]) | _ids(data.splits["val"])
    parts = folds(data, 5)
    held = [_ids(part.splits["val"]) for part in parts]
    n = len(data.splits["train"]) + len(data.splits["val"])
    assert set().union(*held) == pool and sum(len(p.splits["val"]) for p in parts) == n  # each held out once
    for part, out in zip(parts, held):
        assert _ids(part.splits["train"]) | out == pool and len(part.splits["train"]) + len(part.splits["val"]) == n
        assert part.splits["test"] is data.splits["test"]
        # inputs cached for the prepared splits (NCDE's coefficients) must not be read for a fold's
        assert part.folder is None
        assert part.meta.sizes["train"] == len(part.splits["train"]) and part.meta.sizes["val"] == len(part.splits["val"])


def _runs(val: list[float], kfold: list[float], test: list[float]) -> list[dict[str, Any]]:
    """Configuration i: first-seed validation val[i] (loss 0.1 for all: the tie-break cannot help),
    pooled 5-fold accuracy kfold[i], test test[i] on the two other seeds."""
    rows = []
    for i, (v, cv, t) in enumerate(zip(val, kfold, test)):
        rows.append({"family": "f", "config_index": i, "seed": 0, "val": v, "val_loss": 0.1, "test": 0.0})
        rows += [{"family": "f", "config_index": i, "seed": s, "val": v, "val_loss": 0.1, "test": t} for s in (1, 2)]
        rows += [{"family": "f", "config_index": i, "seed": 0, "fold": j, "folds": 5, "n_val": 10,
                  "val": cv, "val_loss": 0.1, "test": 0.0} for j in range(5)]
    return rows


def test_the_rules_pick_by_their_own_scores_and_kfold_is_also_compared_at_its_cost() -> None:
    # every configuration at the ceiling of validation; the folds rank them as test does
    n = 10
    test = [0.5 + 0.04 * i for i in range(n)]
    runs = _runs([1.0] * n, [0.5 + 0.04 * i for i in range(n)], test)
    rows = {r["n"]: r for r in analyse(runs, [n, 5])}
    full = rows[n]
    assert full[f"test {KFOLD}"] == max(test)  # all ten seen: the folds find the best
    assert full[f"test {RULES[0]}"] < max(test)  # the ceiling ties them all: the first in order wins
    assert full["at_ceiling"] == 1.0 and full["oracle"] == max(test)
    # n = 10 trials' training buys 2 configurations of 5 folds: the best of 2 random ones, on average
    assert full["kfold_same_cost_n"] == 2
    pairs = [(a, b) for a in range(n) for b in range(a + 1, n)]
    assert np.isclose(full[f"test {KFOLD} same cost"], np.mean([max(test[a], test[b]) for a, b in pairs]))
    assert rows[5]["kfold_same_cost_n"] == 1
