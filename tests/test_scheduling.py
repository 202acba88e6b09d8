"""The search algorithm and scheduler as the search stage builds them: seeded proposals repeat,
trials stopped early reach Optuna as PRUNED (not as final scores), failures as FAIL, and a
restored ASHA refills its rungs from the metric history MLflow holds."""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest
from ray.tune.schedulers import TrialScheduler

from pipeline.stores import tracking
from pipeline.sweep.scheduling import EPOCH, HistorySource, ResumableASHA, make_searcher
from pipeline.spaces import load_space
from tests.conftest import REPO

MAX_EPOCHS = 4


def _searcher(seed: int, n_startup: int = 3):
    space = load_space(REPO / "search_spaces" / "cfc.yaml", "cfc")
    return make_searcher(space.define_by_run(), space.reference, "val_metric", "max", seed, n_startup, MAX_EPOCHS)


def _proposals(seed: int, n: int) -> list[dict]:
    searcher = _searcher(seed)
    out = []
    for i in range(n):
        out.append(searcher.suggest(f"t{i}"))
        searcher.on_trial_result(f"t{i}", {"val_metric": 0.5 + 0.01 * i, "training_iteration": 1, EPOCH: 1})
        searcher.on_trial_complete(f"t{i}", {"val_metric": 0.5 + 0.01 * i, EPOCH: MAX_EPOCHS})
    return out


def test_the_same_seed_gives_the_same_first_proposals() -> None:
    first, again, other = _proposals(0, 5), _proposals(0, 5), _proposals(1, 5)
    assert first == again  # random start-up trials and the TPE proposals after them
    assert first[0] == other[0]  # the paper's reference configuration comes first whatever the seed
    assert first[1:] != other[1:]


def _states(searcher) -> dict[str, optuna.trial.TrialState]:
    return {f"t{t.number}": t.state for t in searcher._ot_study.get_trials(deepcopy=False)}


def test_stopped_early_is_pruned_failed_is_fail_and_full_budget_is_complete() -> None:
    searcher = _searcher(0)
    for i in range(3):
        searcher.suggest(f"t{i}")
        for epoch in (1, 2):
            searcher.on_trial_result(f"t{i}", {"val_metric": 0.9, "training_iteration": epoch, EPOCH: epoch})
    searcher.on_trial_complete("t0", {"val_metric": 0.9, EPOCH: 2})  # ASHA stopped it at epoch 2
    searcher.on_trial_complete("t1", {"val_metric": 0.9, EPOCH: 2}, error=True)  # failed after 2 epochs
    searcher.on_trial_complete("t2", {"val_metric": 0.7, EPOCH: MAX_EPOCHS})
    states = _states(searcher)
    assert states == {"t0": optuna.trial.TrialState.PRUNED, "t1": optuna.trial.TrialState.FAIL,
                      "t2": optuna.trial.TrialState.COMPLETE}
    # What TPE learns: the completed 0.7 is the best result; the truncated 0.9 stays a pruned
    # trial's last intermediate value (TPE ranks pruned trials below every completed one).
    assert searcher._ot_study.best_value == pytest.approx(0.7)
    assert searcher._ot_study.trials[0].intermediate_values == {1: 0.9, 2: 0.9}


def test_the_result_a_trial_is_stopped_on_reaches_the_study() -> None:
    # Tune passes the result on which ASHA stops a trial to on_trial_complete, not on_trial_result
    searcher = _searcher(0)
    searcher.suggest("t0")
    searcher.on_trial_result("t0", {"val_metric": 0.6, "training_iteration": 1, EPOCH: 1})
    searcher.on_trial_complete("t0", {"val_metric": 0.8, "training_iteration": 2, EPOCH: 2})
    trial = searcher._ot_study.trials[0]
    assert trial.state == optuna.trial.TrialState.PRUNED and trial.intermediate_values == {1: 0.6, 2: 0.8}


def test_the_last_epoch_of_a_completed_trial_reaches_the_study() -> None:
    # ASHA stops every trial that reaches max_t on that result: Tune hands it to on_trial_complete only
    searcher = _searcher(0)
    searcher.suggest("t0")
    for epoch in range(1, MAX_EPOCHS):
        searcher.on_trial_result("t0", {"val_metric": 0.5 + 0.1 * epoch, "training_iteration": epoch, EPOCH: epoch})
    searcher.on_trial_complete("t0", {"val_metric": 0.95, "training_iteration": MAX_EPOCHS, EPOCH: MAX_EPOCHS})
    trial = searcher._ot_study.trials[0]
    assert trial.state == optuna.trial.TrialState.COMPLETE and trial.value == pytest.approx(0.95)
    assert trial.intermediate_values == pytest.approx({1: 0.6, 2: 0.7, 3: 0.8, 4: 0.95})
    assert searcher.trial_number("t0") == 0 and searcher.trial_number("unknown") is None


def test_epochs_reported_again_after_a_restore_reach_the_study_once_without_a_warning() -> None:
    # A trial restored from its checkpoint at epoch 1 trains epochs 2 and 3 again; the searcher
    # restored with it (Tune pickles its state) meets steps the study already holds.
    import pickle
    import warnings

    searcher = _searcher(0)
    searcher.suggest("t0")
    for epoch in (1, 2, 3):
        searcher.on_trial_result("t0", {"val_metric": 0.5 + 0.1 * epoch, "training_iteration": epoch, EPOCH: epoch})
    restored = pickle.loads(pickle.dumps(searcher))
    restored.__dict__.pop("_reported_steps", None)  # as a searcher saved in another process starts
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for epoch in (2, 3, 4):
            restored.on_trial_result("t0", {"val_metric": 0.2, "training_iteration": epoch, EPOCH: epoch})
    assert [str(w.message) for w in caught] == []
    values = restored._ot_study.trials[0].intermediate_values
    assert values == pytest.approx({1: 0.6, 2: 0.7, 3: 0.8, 4: 0.2})  # the first value of a step is kept


class _Trial:
    """The one attribute ASHA reads of a trial."""

    def __init__(self, trial_id: str) -> None:
        self.trial_id = trial_id


def _history(tmp_path: Path, curves: dict[str, list[float]]) -> HistorySource:
    """An MLflow parent run with one child per trial logging `val_metric` per epoch, as trials do."""
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    tracking.ensure_store(uri)
    client = tracking.MlflowClient(uri)
    exp = client.create_experiment("asha")
    parent = tracking.start_run(client, exp, "search/cfc", {"stage": "search"})
    for trial_id, curve in curves.items():
        run = tracking.start_run(client, exp, trial_id, {"ray_trial_id": trial_id}, parent_run_id=parent)
        for epoch, value in enumerate(curve, start=1):
            tracking.log_metrics(client, run, {"val_metric": value}, step=epoch)
    return HistorySource(uri, exp, parent, "val_metric")


def test_a_restored_asha_refills_its_rungs_and_stops_what_the_first_attempt_would(tmp_path: Path) -> None:
    # Before the driver died: four trials reached the rung at epoch 1 with these scores.
    source = _history(tmp_path, {"a": [0.9, 0.95], "b": [0.8], "c": [0.7], "d": [0.85, 0.9]})

    def fresh() -> ResumableASHA:
        asha = ResumableASHA(source, max_t=MAX_EPOCHS, grace_period=1, reduction_factor=2)
        asha.set_search_properties("val_metric", "max")
        return asha

    restored, forgetful = fresh(), fresh()  # a new scheduler refills on its first add
    restored.on_trial_add(None, _Trial("e"))  # the first add after a restore reads MLflow
    assert restored.rung_sizes()[1] == 4 and restored.rung_sizes()[2] == 2
    forgetful._refilled = True  # what Ray's own ASHA does after Tuner.restore: empty rungs
    forgetful.on_trial_add(None, _Trial("e"))
    # A new trial scoring 0.75 at epoch 1 is in the bottom half of what the search has seen ...
    result = {"val_metric": 0.75, EPOCH: 1, "training_iteration": 1}
    assert restored.on_trial_result(None, _Trial("e"), result) == TrialScheduler.STOP
    # ... but facing an empty rung it would run on.
    assert forgetful.on_trial_result(None, _Trial("e"), result) == TrialScheduler.CONTINUE


def test_unpickling_is_what_marks_the_scheduler_for_refilling(tmp_path: Path) -> None:
    import pickle

    source = _history(tmp_path, {"a": [0.9]})
    asha = ResumableASHA(source, max_t=MAX_EPOCHS, grace_period=1, reduction_factor=2)
    asha._refilled = True
    assert pickle.loads(pickle.dumps(asha))._refilled is False


class _NumberedTrial:
    """A trial as Tune hands it to the scheduler: its id and its config with its Optuna number."""

    def __init__(self, number: int) -> None:
        self.trial_id, self.config = f"t{number}", {"optuna_trial_number": number}


def _decisions(scores: dict[int, float], arrival: list[int], round_size: int,
               rounds_in_flight: int = 1) -> dict[int, str]:
    """ASHA's decision at the epoch-1 rung for each trial, results arriving in `arrival` order
    (earlier rounds always end before a later round starts, as the family's searcher ensures)."""
    asha = ResumableASHA(HistorySource("", "", "", "val_metric"), round_size=round_size, max_t=MAX_EPOCHS,
                         grace_period=1, reduction_factor=2, rounds_in_flight=rounds_in_flight)
    asha.set_search_properties("val_metric", "max")
    asha._refilled = True  # nothing to refill: a fresh search
    trials = {n: _NumberedTrial(n) for n in scores}
    for n in trials.values():
        asha.on_trial_add(None, n)
    return {n: asha.on_trial_result(None, trials[n], {"val_metric": scores[n], EPOCH: 1}) for n in arrival}


def test_asha_decides_by_earlier_rounds_never_by_arrival_order() -> None:
    scores = {0: 0.5, 1: 0.9, 2: 0.6, 3: 0.4, 4: 0.95, 5: 0.55}
    rounds = [[0, 1], [2, 3], [4, 5]]  # round size 2
    orders = [[n for r in rounds for n in r], [n for r in rounds for n in reversed(r)]]
    first, second = (_decisions(scores, order, 2) for order in orders)
    assert first == second
    # round 0: nothing earlier, both go on; round 1 against {0.5, 0.9}: the median cutoff 0.7 stops
    # both; round 2 against {0.5, 0.9, 0.6, 0.4}: cutoff 0.55 stops neither (0.55 is not below it)
    assert [first[n] for n in range(6)] == [TrialScheduler.CONTINUE] * 2 + [TrialScheduler.STOP] * 2 + \
        [TrialScheduler.CONTINUE] * 2
    # Ray's own rule (judged against whoever arrived first) would depend on the order:
    # in round 1, trial 3 arriving before trial 2 would face {0.5, 0.9} and trial 2 {0.5, 0.9, 0.4}.


def test_with_two_rounds_in_flight_asha_judges_a_round_against_those_two_back() -> None:
    scores = {0: 0.5, 1: 0.9, 2: 0.6, 3: 0.4, 4: 0.95, 5: 0.55, 6: 0.3, 7: 0.7}
    rounds = [[0, 1], [2, 3], [4, 5], [6, 7]]
    # round k runs beside round k-1: any interleaving of the two is possible; here round k-1's
    # trials arrive after round k's or before them
    late = [0, 1, 4, 5, 2, 3, 6, 7]
    orders = [[n for r in rounds for n in r], [n for r in rounds for n in reversed(r)], late]
    first, *others = (_decisions(scores, order, 2, rounds_in_flight=2) for order in orders)
    assert all(o == first for o in others)
    # rounds 0 and 1: nothing two rounds back, all go on; round 2 against round 0 {0.5, 0.9}: the
    # cutoff 0.7 stops 5 (0.55), not 4 (0.95); round 3 against rounds 0-1 {0.5, 0.9, 0.6, 0.4}:
    # the cutoff 0.55 stops 6 (0.3), not 7 (0.7)
    C, S = TrialScheduler.CONTINUE, TrialScheduler.STOP
    assert [first[n] for n in range(8)] == [C, C, C, C, C, S, S, C]
