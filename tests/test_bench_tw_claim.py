"""benchmarks/papers/tw_claim.py: the Temporal Weights paper's claim (fewer epochs, fewer parameters,
the baseline's AUC reached) read from two final records, with a verdict that can go each way."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.papers import tw_claim
from benchmarks.papers.tw_claim import FAILS, HOLDS, NOT_SEPARATED


def _record(root: Path, family: str, tests: list[float], curves: list[list[float]], params: int,
            per_epoch: float = 10.0) -> None:
    folder = root / "results" / "physionet2012" / "final"
    folder.mkdir(parents=True, exist_ok=True)
    seeds = [{"seed": i, "test": t, "curve": c, "num_params": params, "seconds_per_epoch": per_epoch,
              "best_epoch": c.index(max(c)) + 1} for i, (t, c) in enumerate(zip(tests, curves))]
    (folder / f"{family}.json").write_text(json.dumps({"family": family, "mode": "max", "seeds": seeds}))


def _ramp(top: float, epochs: int) -> list[float]:
    return [round(top * (i + 1) / epochs, 6) for i in range(epochs)]


def _main(root: Path, out: Path | None = None) -> dict:
    return tw_claim.main(["--root", str(root), *(["--out", str(out)] if out else [])])


def test_the_claim_holds_when_the_lean_model_scores_as_high_in_fewer_epochs(tmp_path: Path) -> None:
    _record(tmp_path, "latent_ode", [0.80, 0.81, 0.82], [_ramp(0.80, 80)] * 3, 163_972)
    _record(tmp_path, "latent_ode_tw", [0.81, 0.82, 0.83], [_ramp(0.82, 31)] * 3, 76_427, per_epoch=20.0)
    report = _main(tmp_path, tmp_path / "out")
    k = report["comparison"]
    assert k["claim"] == HOLDS and k["diff"] == pytest.approx(0.01)
    assert k["params_ratio"] == pytest.approx(76_427 / 163_972)
    assert k["wall_ratio"] == pytest.approx(20.0 * 31 / (10.0 * 80))
    assert k["at_epoch"] == 31 and k["base_val_at_cand_epochs"] == pytest.approx(0.80 * 31 / 80, abs=1e-6)
    assert k["base_reaches_cand_best_at"] is None  # the ramp to 0.80 never reaches 0.82
    assert k["interval"][0] < 0.01 < k["interval"][1]
    text = (tmp_path / "out" / "tw_claim.md").read_text()
    assert "**The claim holds.**" in text and "| latent_ode_tw | 76,427 | 31 | 20.0 | 10 min |" in text
    assert json.loads((tmp_path / "out" / "tw_claim.json").read_text())["comparison"]["claim"] == HOLDS


def test_a_lower_mean_inside_the_noise_is_not_separated_and_a_clear_loss_does_not_hold(tmp_path: Path) -> None:
    _record(tmp_path, "latent_ode", [0.80, 0.83, 0.86], [_ramp(0.85, 80)] * 3, 163_972)
    _record(tmp_path, "latent_ode_tw", [0.79, 0.82, 0.85], [_ramp(0.84, 31)] * 3, 76_427)
    assert _main(tmp_path)["comparison"]["claim"] == NOT_SEPARATED
    _record(tmp_path, "latent_ode_tw", [0.60, 0.61, 0.62], [_ramp(0.84, 31)] * 3, 76_427)
    k = _main(tmp_path)["comparison"]
    assert k["claim"] == FAILS and k["interval"][1] < 0


def test_fewer_epochs_do_not_count_when_the_baseline_got_there_as_fast(tmp_path: Path) -> None:
    fast = [0.9] * 80  # the baseline's validation is at its best from the first epoch
    _record(tmp_path, "latent_ode", [0.80, 0.81, 0.82], [fast] * 3, 163_972)
    _record(tmp_path, "latent_ode_tw", [0.81, 0.82, 0.83], [_ramp(0.85, 31)] * 3, 76_427)
    k = _main(tmp_path)["comparison"]
    assert k["base_reaches_cand_best_at"] == 1 and k["claim"] == FAILS
    _record(tmp_path, "latent_ode_tw", [0.81, 0.82, 0.83], [_ramp(0.85, 31)] * 3, 200_000)  # not leaner
    _record(tmp_path, "latent_ode", [0.80, 0.81, 0.82], [_ramp(0.80, 80)] * 3, 163_972)
    assert _main(tmp_path)["comparison"]["claim"] == FAILS


def test_mean_curve_stops_at_the_shortest_seed_and_a_missing_record_is_named(tmp_path: Path) -> None:
    assert tw_claim.mean_curve([[0.1, 0.2, 0.3], [0.3, 0.4]]) == pytest.approx([0.2, 0.3])
    with pytest.raises(SystemExit, match=r"latent_ode\.json: no final record of latent_ode on physionet2012"):
        _main(tmp_path)
    _record(tmp_path, "latent_ode", [0.8], [_ramp(0.8, 80)], 163_972)
    with pytest.raises(SystemExit, match="1 seed\\(s\\) with a test score and a curve"):
        _main(tmp_path)
