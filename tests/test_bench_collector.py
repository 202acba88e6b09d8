"""benchmarks/cluster/collector.py: the collector's time in a real Tune trial, with and without freeze_survivors."""

from __future__ import annotations

import pytest

from benchmarks.cluster.collector import render, summarise


def _trial(mode: str, tracked: int, epochs: list[tuple[float, float, int]], setup_s: float) -> dict:
    return {"mode": mode, "tracked_objects": tracked, "setup": {"gc_seconds": setup_s, "collections": 9},
            "epochs": [{"epoch_seconds": s, "gc_seconds": g, "collections": n} for s, g, n in epochs]}


def test_summary_leaves_out_first_epochs_and_compares_the_modes():
    trials = [_trial("as_before", 400_000, [(9.0, 9.0, 99), (1.1, 0.04, 40), (1.3, 0.06, 40)], 0.3),
              _trial("frozen", 150_000, [(9.0, 9.0, 99), (1.0, 0.01, 40), (1.0, 0.02, 40)], 0.1)]
    s = summarise(trials)
    assert s["as_before"]["epochs"] == 2 and s["as_before"]["epoch_s"] == pytest.approx(1.2)
    assert s["frozen"]["gc_s_per_epoch"] == pytest.approx(0.015)
    assert s["ratio"]["epoch_s"] == pytest.approx(1.2)
    assert s["ratio"]["setup_gc_s"] == pytest.approx(3.0)
    assert s["as_before"]["tracked_objects"] == 400_000


@pytest.mark.slow
def test_a_real_tune_trial_s_collector_walks_a_fraction_of_the_objects_when_frozen(tmp_path):
    """Two real Tune trials on a local Ray (cfc on JapaneseVowels from aeon, 3 epochs): in the
    frozen one the collector walks a fraction of the objects while the Trainer is built. (How much
    less time it spends there is the benchmark's figure, not a check: two trials' seconds on a
    loaded 2-core machine go either way; the object counts do not.)"""
    from benchmarks.cluster.collector import main

    report = main(["--dataset", "japanese_vowels", "--family", "cfc", "--epochs", "3", "--repeats", "1",
                   "--out", str(tmp_path)])
    s = report["summary"]
    assert s["frozen"]["tracked_objects"] < s["as_before"]["tracked_objects"] / 2
    assert s["frozen"]["setup_collections"] > 0 and s["as_before"]["setup_collections"] > 0  # both measured
    assert (tmp_path / "collector.md").read_text() == render(report)
