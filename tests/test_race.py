"""Racing the final seeds on hand-made scores: a clear pair is separated, a close pair shown
equivalent, an open pair gains seeds and stops at the cap, and by simulation the race calls an
equal pair separated (or a pair at the margin equivalent) no more often than its alpha."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.rules.race_error import simulate
from pipeline.config.params import load_params
from pipeline.config.race import RaceParams
from pipeline.errors import ConfigError
from pipeline.final.race import AT_CAP, EQUIVALENT, OPEN, SEPARATED, look, more_seeds, race_summary

RACE = RaceParams(enabled=True, margin=0.02, max_seeds=8, seeds_per_round=1)
BEST = [0.960, 0.970, 0.950, 0.960, 0.965]
FAR = [0.900, 0.910, 0.905, 0.900, 0.910]
CLOSE = [0.9605, 0.9615, 0.9595, 0.9600, 0.9610]
NOISY = [0.93, 0.99, 0.95, 0.97, 0.94]


def _record(tests: list[float], val: float, loss: float = 0.1) -> dict:
    return {"metric": "auroc", "mode": "max", "status": "ok", "val_mean": val, "val_loss_mean": loss,
            "seeds": [{"test": t} for t in tests]}


def test_looks_and_alpha_per_look() -> None:
    assert RACE.looks(5) == 4 and RACE.alpha_per_look(5) == pytest.approx(0.0125)
    assert RaceParams(enabled=True, max_seeds=10, seeds_per_round=2).looks(5) == 4  # 5 -> 7 -> 9 -> 10
    assert RaceParams().looks(5) == 1 and RaceParams().alpha_per_look(5) == 0.05  # off: one look, all of alpha


def test_a_clear_pair_is_separated_at_the_first_look() -> None:
    found = look({"a": _record(BEST, 0.99), "b": _record(FAR, 0.98)}, RACE, 5)
    assert found.best == "a" and found.decisions == {"b": SEPARATED} and found.extend == []


def test_a_close_pair_is_shown_equivalent() -> None:
    found = look({"a": _record(BEST, 0.99), "c": _record(CLOSE, 0.98)}, RACE, 5)
    assert found.decisions == {"c": EQUIVALENT} and found.extend == []


def test_an_open_pair_gains_seeds_with_the_best_then_stops_at_the_cap() -> None:
    records = {"a": _record(BEST, 0.99), "n": _record(NOISY, 0.98), "b": _record(FAR, 0.97)}
    found = look(records, RACE, 5)
    assert found.decisions == {"n": OPEN, "b": SEPARATED} and found.extend == ["a", "n"]
    capped = {f: _record((r_tests * 2)[:8], r["val_mean"]) for f, r, r_tests in
              [("a", records["a"], BEST), ("n", records["n"], NOISY), ("b", records["b"], FAR)]}
    done = look(capped, RACE, 5)
    assert done.extend == [] and done.decisions["n"] == AT_CAP


def test_the_best_on_validation_leads_the_race_whatever_its_test_score() -> None:
    found = look({"a": _record(NOISY, 0.99), "b": _record(BEST, 0.98)}, RACE, 5)
    assert found.best == "a" and found.extend == ["a", "b"]


def test_a_race_that_is_off_adds_nothing() -> None:
    records = {"a": _record(BEST, 0.99), "n": _record(NOISY, 0.98)}
    found = look(records, RaceParams(margin=0.02), 5)
    assert found.extend == [] and found.decisions == {"n": OPEN}
    summary = race_summary(RaceParams(margin=0.02), 5, 1, found)
    assert summary["enabled"] is False and summary["alpha_per_look"] == 0.05 and summary["decisions"] == {"n": OPEN}


def test_more_seeds_follow_the_configured_ones_and_skip_the_search_seeds() -> None:
    assert more_seeds([0, 1, 2, 3, 4], 2) == [5, 6]
    assert more_seeds([998, 999], 3, avoid=[1000]) == [1001, 1002, 1003]


@pytest.mark.parametrize("kind", ["equal", "at margin"])
def test_the_race_errs_no_more_often_than_its_alpha(kind: str) -> None:
    found = simulate(kind, 150, 3, 0.01, RaceParams(enabled=True, margin=0.01, max_seeds=10), 5, seed=1)
    assert found["error_rate"] <= 0.05
    assert found["mean_seeds"] > 5  # the race did run: open families gained seeds


def test_a_clear_gap_is_separated_by_nearly_every_race() -> None:
    found = simulate("clear gap", 40, 3, 0.01, RaceParams(enabled=True, margin=0.01, max_seeds=10), 5, seed=2)
    assert found["separated_share"] > 0.9


@pytest.mark.parametrize(("race", "words"), [
    ("{enabled: true, max_seeds: 3}", "race.max_seeds is 3, below the 5 configured `seeds`; allowed: 5 to 100"),
    ("{margin: 0}", "`final.race.margin`: Input should be greater than 0 (got 0)"),
    ("{margin: -0.5}", "`final.race.margin`: Input should be greater than 0 (got -0.5)"),
    ("{seeds_per_round: 0}", "`final.race.seeds_per_round`"),
    ("{cap: 10}", "`final.race.cap`"),
])
def test_bad_race_settings_are_refused_in_one_line(tmp_path: Path, race: str, words: str) -> None:
    params = tmp_path / "params.yaml"
    params.write_text("datasets: [d]\nfamilies: [cfc]\nprepare: {d: {kind: xor}}\n"
                      f"final: {{seeds: [0, 1, 2, 3, 4], race: {race}}}\n")
    with pytest.raises(ConfigError) as err:
        load_params(params)
    assert words in str(err.value) and "\n" not in str(err.value)
