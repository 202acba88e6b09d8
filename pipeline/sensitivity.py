"""How much a search's validation metric depends on each hyperparameter, from its Optuna study.

Each search's study (every trial's parameters, per-epoch validation metric and final state as
the scheduler left it: COMPLETE, PRUNED by ASHA or FAIL) is copied, when the search ends, into
one Optuna storage for the project (`search.optuna_storage`, an SQLite file by default), so
`optuna-dashboard sqlite:///optuna.db` browses every search. The searcher keeps its study in
memory while it runs because Ray pickles it into the experiment checkpoint: a restored search
goes on from exactly that state (an RDB study would also hold trials the restored search
never knew, left RUNNING forever).

Importances come from Optuna's fANOVA evaluator on the persisted study, on two bases:
  complete   the final validation metric of trials that ran every epoch (what the search ranks)
  epoch g    the validation metric every trial reached at ASHA's first rung (epoch g), which
             the pruned trials have too: more trials, a lower-fidelity target.
A basis needs at least MIN_TRIALS trials and a parameter that varied; otherwise it records why not.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import optuna
from optuna.importance import FanovaImportanceEvaluator, get_param_importances
from optuna.trial import TrialState, create_trial

from pipeline.errors import ConfigError

MIN_TRIALS = 3  # fANOVA on two points says nothing


def storage_url(root: Path, value: str) -> str:
    """`search.optuna_storage` as a SQLAlchemy URL: a URL as given, a file path (relative to
    the root) as an absolute SQLite URL (Ray trial processes change their working directory)."""
    if "://" in value:
        return value
    if not value:
        raise ConfigError("params.yaml: key `search.optuna_storage` is empty; give a file path such as "
                          "optuna.db or a database URL such as postgresql://host/optuna")
    return f"sqlite:///{(root / value).resolve()}"


def study_name(dataset: str, family: str, parent_run_id: str) -> str:
    """One study per search: dataset/family, then the MLflow parent run it belongs to."""
    return f"{dataset}/{family}/{parent_run_id[:12]}"


def persist_study(study: optuna.Study, url: str, name: str, attrs: dict[str, Any]) -> str:
    """Copy the in-memory `study` to `url` as `name` (replacing an earlier copy of the same
    search, e.g. after a resumed search finished); `attrs` become study user attributes."""
    storage = optuna.storages.get_storage(url)
    try:
        optuna.delete_study(study_name=name, storage=storage)
    except KeyError:
        pass  # first copy
    optuna.copy_study(from_study_name=study.study_name, from_storage=study._storage, to_storage=storage,
                      to_study_name=name)
    copy = optuna.load_study(study_name=name, storage=storage)
    for key, value in attrs.items():
        copy.set_user_attr(key, value)
    return name


def _rung_study(study: optuna.Study, epoch: int) -> optuna.Study:
    """The trials that reached `epoch`, as COMPLETE trials valued by their metric at that epoch."""
    rung = optuna.create_study(directions=study.directions)
    for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED)):
        if epoch in t.intermediate_values:
            rung.add_trial(create_trial(params=t.params, distributions=t.distributions,
                                        value=t.intermediate_values[epoch]))
    return rung


def _evaluate(study: optuna.Study, seed: int) -> dict[str, Any]:
    trials = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    varied = sorted({k for t in trials for k in t.params if len({repr(u.params.get(k)) for u in trials}) > 1})
    why = (f"{len(trials)} trial(s), at least {MIN_TRIALS} needed" if len(trials) < MIN_TRIALS
           else "no parameter varied" if not varied
           else "every trial scored the same" if len({t.value for t in trials}) == 1 else None)
    if why:
        return {"n_trials": len(trials), "values": None, "reason": why}
    try:
        values = get_param_importances(study, evaluator=FanovaImportanceEvaluator(seed=seed))
    except (ValueError, RuntimeError) as exc:  # e.g. conditional parameters absent from every trial
        return {"n_trials": len(trials), "values": None, "reason": f"fANOVA: {exc}"}
    return {"n_trials": len(trials), "values": {k: round(float(v), 4) for k, v in values.items()}, "reason": None}


def importances(url: str, name: str, rung_epoch: int, seed: int) -> dict[str, Any]:
    """fANOVA importances (normalised to sum to 1) of the persisted study `name`, per basis:
    {"evaluator": "fanova", "complete": {...}, "epoch <g>": {...}}, each
    {"n_trials": int, "values": {param: importance} | None, "reason": str | None}."""
    study = optuna.load_study(study_name=name, storage=url)
    return {"evaluator": "fanova", "complete": _evaluate(study, seed),
            f"epoch {rung_epoch}": _evaluate(_rung_study(study, rung_epoch), seed)}
