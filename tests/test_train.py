"""The shared training loop: seeded, resumable from its state, and failing loudly."""

from __future__ import annotations

import time

import numpy as np
import pytest

from pipeline.config import XorParams
from pipeline.data.contract import Dataset, Split
from pipeline.data.kinds.xor import build as build_xor
from pipeline.errors import TrialFailedError
from pipeline.training.loop import TimeLimitReached, Trainer, TrainSettings

KWARGS = {"hidden_size": 8, "backbone_units": 8, "backbone_layers": 1}
SETTINGS = TrainSettings(lr=1e-2, batch_size=16)


@pytest.fixture(scope="module")
def data() -> Dataset:
    return build_xor("x", XorParams(kind="xor", n_train=80, n_test=20, seed=5))


def test_same_seed_same_run_other_seed_other_run(data: Dataset) -> None:
    runs = [Trainer("cfc", KWARGS, SETTINGS, data, seed).run_epoch()["train_loss"] for seed in (0, 0, 1)]
    assert runs[0] == runs[1] and runs[0] != runs[2]


def test_resuming_from_state_continues_the_same_run(data: Dataset) -> None:
    straight = Trainer("cfc", KWARGS, SETTINGS, data, 3)
    straight.run_epoch()
    state = straight.state()
    expected = straight.run_epoch()["train_loss"]
    resumed = Trainer("cfc", KWARGS, SETTINGS, data, 99)  # another seed: everything must come from state
    resumed.load_state(state)
    assert resumed.epoch == 1 and resumed.run_epoch()["train_loss"] == pytest.approx(expected, rel=1e-6)


def test_each_epoch_reports_early_stopping_s_count_for_the_progress_display(data: Dataset) -> None:
    trainer = Trainer("cfc", KWARGS, TrainSettings(lr=1e-12, batch_size=16), data, 0)  # nothing moves
    counts = [trainer.run_epoch()["stale_epochs"] for _ in range(3)]
    assert counts == [0, 1, 2] and trainer.stale_epochs == 2  # the first epoch is progress, then none


def test_deadline_stops_between_batches(data: Dataset) -> None:
    trainer = Trainer("cfc", KWARGS, SETTINGS, data, 0)
    with pytest.raises(TimeLimitReached, match="epoch 1"):
        trainer.run_epoch(deadline=time.monotonic() - 1)
    assert trainer.epoch == 0


def test_non_finite_loss_fails_the_run(data: Dataset) -> None:
    train = data.splits["train"]
    x = train.x.copy()
    x[:, 0, 0] = np.inf
    poisoned = Dataset(data.meta, {**data.splits, "train": Split(x, train.t, train.mask, train.y)})
    # an infinite observation makes the CDE path's spline coefficients, and so the loss, NaN
    ncde = {"hidden_size": 8, "vf_units": 8, "vf_layers": 1}
    with pytest.raises(TrialFailedError, match="non-finite training loss"):
        Trainer("ncde", ncde, SETTINGS, poisoned, 0).run_epoch()


def test_solver_failure_fails_the_run(data: Dataset) -> None:
    # dopri5 allowed a single adaptive step per interval cannot cross one: torchdiffeq asserts.
    kwargs = {"hidden_size": 8, "vf_units": 8, "method": "dopri5", "rtol": 1e-9, "atol": 1e-9, "max_steps": 1}
    with pytest.raises(TrialFailedError, match="ODE solver failed"):
        Trainer("ode_rnn", kwargs, SETTINGS, data, 0).run_epoch()
