"""Sepsis `task: hourly` (Temporal Weights, Kohan et al. 2022 Table 5): one label per kept hour.

Stays in the real .psv format, zipped as the two training sets, served over HTTP and prepared
through the real path. The hourly labels are written the way the challenge writes SepsisLabel
(1 from t_sepsis - 6 on), computed here from a clinical onset independently of the module, and
the prepared y must match them hour by hour.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from pydantic import ValidationError

from pipeline.config import SepsisParams, load_params
from pipeline.errors import ConfigError
from tests.conftest import default_params, prepare_served, write_params
from tests.test_data_sepsis import filler, psv, write_zip

N_CHANNELS = 34 + 5  # time-varying values, then the statics
MAX_HOURS = 72


def challenge_labels(iculos: list[int], t_sepsis: float | None) -> list[int]:
    """The challenge's SepsisLabel: 1 if t >= t_sepsis - 6, else 0; all 0 without sepsis."""
    return [int(t_sepsis is not None and t >= t_sepsis - 6) for t in iculos]


GAPPY_HOURS = [5, 6, 8, 9, 12]
# Hand-made stays, told apart by Age: (ICULOS of each row, clinical onset or None).
STAYS = {
    81.0: (list(range(1, 31)), 20),          # onset at hour 20: hours 14..30 positive
    82.0: (list(range(1, 81)), 76),          # onset at hour 76: positive from 70; cut at 72
    83.0: (list(range(1, 11)), None),        # never septic
    84.0: (GAPPY_HOURS, 14),                 # starts at hour 5, with gaps; positive from hour 8
    85.0: ([1, 2], 3),                       # 2 hours: the reference's grid is too short -> dropped
}


def special_files() -> dict[str, bytes]:
    return {f"p{900 + i:06d}.psv": psv(hours, label=challenge_labels(hours, onset), age=age)
            for i, (age, (hours, onset)) in enumerate(STAYS.items())}


@pytest.fixture
def served(http_server):
    write_zip(http_server.root / "training_setA.zip", "training", {**special_files(), **filler(10, 12, 20.0)})
    write_zip(http_server.root / "training_setB.zip", "training_setB", filler(100001, 12, 40.0))
    return http_server


def run(tmp_path: Path, server, **params):
    return prepare_served(tmp_path, server, "sepsis_hourly", SepsisParams(kind="sepsis", **params))


def by_age(ds) -> dict[float, tuple[str, int]]:
    """Age (de-standardised, rounded) -> (split, row) of every prepared stay."""
    age = ds.meta.channels.index("Age")
    mean, std = ds.meta.norm_mean[age], ds.meta.norm_std[age]
    out = {}
    for name, split in ds.splits.items():
        for i, a in enumerate(np.round(split.x[:, 0, age] * std + mean, 3).tolist()):
            assert a not in out, f"two stays of age {a}"
            out[a] = (name, i)
    return out


def test_hourly_labels_match_the_hand_computation(tmp_path, served):
    meta, ds = run(tmp_path, served, task="hourly")
    assert (meta.task, meta.per_step, meta.output_size, meta.metric) == ("binary", True, 1, "auroc")
    assert len(meta.channels) == N_CHANNELS and meta.static_channels[-1] == "HospAdmTime"
    assert "SepsisLabel" in meta.source and "Kohan" in meta.source
    assert sum(meta.sizes.values()) == 4 + 24  # the 2-hour stay is dropped, as in the per-stay task
    for split in ds.splits.values():
        n = len(split)
        assert split.x.shape == (n, MAX_HOURS, N_CHANNELS) and split.y.shape == (n, MAX_HOURS)
        assert split.y.dtype == np.int64 and split.mask.dtype == bool
        assert (split.y[~split.mask] == 0).all(), "padding is labelled 0 (and masked out)"
    where = by_age(ds)
    assert 85.0 not in where

    def hours(age: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        name, i = where[age]
        s = ds.splits[name]
        return s.t[i][s.mask[i]], s.y[i][s.mask[i]], s.mask[i]

    # Onset at hour 20: SepsisLabel, hence y, is 1 from hour 14 (= 20 - 6) to the end, hour 30.
    t, y, mask = hours(81.0)
    np.testing.assert_array_equal(t, np.arange(1, 31))
    assert mask.sum() == 30 and mask[:30].all()
    np.testing.assert_array_equal(np.flatnonzero(y) + 1, np.arange(14, 31))
    # Onset at hour 76: the rows are cut at hour 72, so only hours 70, 71, 72 are positive.
    t, y, mask = hours(82.0)
    assert mask.all() and t[-1] == 72
    np.testing.assert_array_equal(t[y == 1], [70, 71, 72])
    # Never septic: every hour 0, every hour scored.
    t, y, mask = hours(83.0)
    assert mask.sum() == 10 and not y.any()
    # Rows with gaps: labels follow the rows (ICULOS 5, 6, 8, 9, 12), onset 14 -> from hour 8.
    t, y, _ = hours(84.0)
    np.testing.assert_array_equal(t, GAPPY_HOURS)
    np.testing.assert_array_equal(y, [0, 0, 1, 1, 1])


def test_the_same_stays_and_splits_as_the_per_stay_task(tmp_path, served):
    _, stay = run(tmp_path / "stay", served, seed=5)
    _, hourly = run(tmp_path / "hourly", served, seed=5, task="hourly")
    assert stay.meta.per_step is False and stay.meta.channels == hourly.meta.channels
    assert stay.meta.norm_mean == hourly.meta.norm_mean, "same stays in train -> same statistics"
    for name in ("train", "val", "test"):
        a, b = stay.splits[name], hourly.splits[name]
        np.testing.assert_array_equal(a.x, b.x)
        np.testing.assert_array_equal(a.mask, b.mask)
        assert a.y.shape == (len(a),)
        # The per-stay label is the hourly labels' maximum over the kept hours.
        np.testing.assert_array_equal(a.y, b.y.max(axis=1))


def test_intensity_channels_with_hourly_labels(tmp_path, served):
    meta, ds = run(tmp_path, served, task="hourly", intensity=True)
    assert len(meta.channels) == 34 * 2 + 7 and meta.per_step
    name, i = by_age(ds)[81.0]
    s = ds.splits[name]
    np.testing.assert_array_equal(s.y[i][s.mask[i]], challenge_labels(list(range(1, 31)), 20))


def test_task_defaults_to_stay_and_refuses_other_values():
    assert SepsisParams(kind="sepsis").task == "stay"
    with pytest.raises(ValidationError, match="'stay' or 'hourly'"):
        SepsisParams(kind="sepsis", task="daily")
    with pytest.raises(ValidationError):
        SepsisParams(kind="sepsis", task=True)  # strict: not a string


@pytest.mark.parametrize("value", ["daily", "Hourly", 1])
def test_a_bad_task_in_params_yaml_is_one_line(tmp_path, value):
    raw = default_params()
    raw["prepare"]["sepsis_hourly"] = {"kind": "sepsis", "task": value}
    path = write_params(tmp_path, raw)
    with pytest.raises(ConfigError) as err:
        load_params(path)
    message = str(err.value)
    assert "\n" not in message and str(path) in message
    assert "prepare.sepsis_hourly.task" in message and "'stay' or 'hourly'" in message, message


def test_the_yaml_section_for_the_lead_loads(tmp_path):
    raw = default_params()
    raw["prepare"]["sepsis_hourly"] = {"kind": "sepsis", "task": "hourly"}
    p = load_params(write_params(tmp_path, raw)).prepare["sepsis_hourly"]
    assert (p.task, p.max_hours, p.intensity) == ("hourly", 72, False)


def test_a_temporal_weights_family_trains_per_hour(tmp_path, served):
    """One epoch of ode_rnn_tw on the per-hour labels: per-step loss over the scored hours, AUROC."""
    from pipeline.training.loop import Trainer, TrainSettings
    from tests.test_models import SMALL

    _, ds = run(tmp_path, served, task="hourly")
    trainer = Trainer("ode_rnn_tw", SMALL["ode_rnn_tw"], TrainSettings(lr=1e-2, batch_size=8), ds, seed=0)
    assert np.isfinite(trainer.run_epoch()["train_loss"])
    assert 0.0 <= trainer.evaluate("val") <= 1.0
