"""Equal counts tie: accuracy means from each seed's (correct, scored) counts, the best family by the
documented rule (validation mean, then validation loss), and the tie line under the table."""

from __future__ import annotations

import itertools
import statistics

import numpy as np
import torch

from pipeline.data.contract import Meta
from pipeline.final.counts import count_metrics, counts_from_metrics, split_summary, summed_counts
from pipeline.reporting.tables import tie_lines
from pipeline.comparison.ties import UNCOUNTED_NOTE, best_family, tied_at_top, uncounted_note
from pipeline.training.metrics import counts, score

# The default run's four families at 266 of 270 validation series (54 series x 5 seeds), each
# with a different spread of the 4 misses over its seeds, and their mean validation losses.
SEED_COUNTS = {"cfc": [54, 53, 54, 53, 52], "cde_fwp_delta": [54, 53, 54, 51, 54],
               "ncde": [53, 53, 53, 53, 54], "ode_rnn": [54, 54, 53, 52, 53]}
LOSSES = {"cfc": 0.1487, "cde_fwp_delta": 0.0446, "ncde": 0.0768, "ode_rnn": 0.0945}


def _float32_mean(correct: list[int]) -> float:
    """The means as they were made before counts: each seed a float32 mean of 0/1, then fmean."""
    scores = []
    for c in correct:
        hits = torch.zeros(54)
        hits[:c] = 1
        scores.append(hits.float().mean().item())
    return statistics.fmean(scores)


def _runs(correct: list[int]) -> list[dict]:
    return [{"val": c / 54, "val_counts": [c, 54], "test": 0.9, "test_counts": [90, 100]} for c in correct]


def _record(family: str, correct: list[int], counted: bool = True) -> dict:
    runs = _runs(correct)
    mean = split_summary(runs, "val")[0] if counted else _float32_mean(correct)
    return {"family": family, "metric": "accuracy", "mode": "max", "status": "ok", "n_seeds": len(correct),
            "val_mean": mean, "val_loss_mean": LOSSES[family], **(summed_counts(runs) if counted else {})}


def test_float_means_of_equal_counts_differ_in_the_last_bits() -> None:
    """The fault this guards against is real: equal counts spread differently over seeds gave
    float means that differ, so a rounding to 9 digits split the tie."""
    means = {f: _float32_mean(c) for f, c in SEED_COUNTS.items()}
    assert len({round(m, 9) for m in means.values()}) > 1


def test_equal_counts_give_equal_means_in_every_order() -> None:
    for family, correct in SEED_COUNTS.items():
        means = {split_summary(_runs(list(order)), "val")[0] for order in itertools.permutations(correct)}
        assert means == {266 / 270}, family


def test_four_families_tied_on_counts_are_decided_by_the_validation_loss() -> None:
    records = {f: _record(f, c) for f, c in SEED_COUNTS.items()}
    assert tied_at_top(records) == list(SEED_COUNTS)
    assert best_family(records) == "cde_fwp_delta"
    assert uncounted_note(records) is None
    line = tie_lines(records, "cde_fwp_delta")[0]
    assert line.startswith("Best on validation: 4 families tie at 98.52 (each 266 correct of 270 validation")
    assert "cde_fwp_delta 0.0446" in line


def test_a_better_count_wins_whatever_the_loss() -> None:
    records = {f: _record(f, c) for f, c in SEED_COUNTS.items()}
    records["cfc"] = _record("cfc", [54, 54, 54, 53, 52])  # 267 of 270
    assert best_family(records) == "cfc" and tied_at_top(records) == ["cfc"]
    assert tie_lines(records, "cfc") == []


def test_records_without_counts_are_compared_as_before_and_say_so() -> None:
    records = {f: _record(f, c, counted=False) for f, c in SEED_COUNTS.items()}
    old_rule = max(records, key=lambda f: (round(records[f]["val_mean"], 9), -records[f]["val_loss_mean"]))
    assert best_family(records) == old_rule == "ncde"  # the committed default report's pick
    assert uncounted_note(records) == UNCOUNTED_NOTE
    assert UNCOUNTED_NOTE in tie_lines(records, old_rule)


def test_minimised_metrics_and_failed_families() -> None:
    records = {"a": {"metric": "mse", "mode": "min", "val_mean": 0.5, "val_loss_mean": 0.5},
               "b": {"metric": "mse", "mode": "min", "val_mean": 0.4, "val_loss_mean": 0.9},
               "c": {"metric": "mse", "status": "failed", "mode": "min"}}
    assert best_family(records) == "b"
    assert best_family({"c": records["c"]}) is None and tied_at_top({"c": records["c"]}) == []


def test_accuracy_is_counts_divided_in_float64() -> None:
    meta = Meta("m", "classification", False, 3, "accuracy", ["x"], "hand-made")
    output = torch.tensor(np.eye(3)[[0, 1, 2, 0, 1, 2, 0]], dtype=torch.float32)
    y = torch.tensor([0, 1, 2, 0, 1, 2, 1])
    mask = torch.ones(7, 1, dtype=torch.bool)
    assert counts(meta, output, y, mask) == (6, 7)
    assert score(meta, output, y, mask) == 6 / 7  # bit for bit, not float32's 0.85714287


def test_counts_round_trip_through_mlflow_metrics() -> None:
    result = {"val_counts": [53, 54], "test_counts": [340, 370]}
    logged = count_metrics(result)
    assert logged == {"final_val_correct": 53, "final_val_scored": 54, "final_test_correct": 340,
                      "final_test_scored": 370}
    assert counts_from_metrics({k: float(v) for k, v in logged.items()}) == result
    assert count_metrics({"val": 0.5}) == {} and counts_from_metrics({"final_val": 0.5}) == {}
