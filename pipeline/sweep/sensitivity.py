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
A basis needs at least MIN_TRIALS trials and a parameter that varied; otherwise it records why not
(and the report shows no importance from fewer trials, whatever an older record holds).
"""

from __future__ import annotations

import copy
import os
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState, create_trial

from pipeline.errors import ConfigError
from pipeline.names import shown
from pipeline.stores.database_url import check_url

# Fewer trials and fANOVA's ranking is noise: on a synthetic objective whose most important key is
# known (benchmarks/rules/importance.py, random trials over a family-like space of six keys), it ranks that
# key first in 4 of 20 searches of 6 trials, in 12 of 20 of 12 trials, 16 of 20 of 14, and 19 or 20
# of 20 from 15 on. 14 is the smallest count from which every count measured reaches 15 of 20
# (docs/benchmarks/importance.md).
MIN_TRIALS = 14


def storage_url(root: Path, value: str) -> str:
    """`search.optuna_storage` as a SQLAlchemy URL: a URL as given, a file path (relative to
    the root) as an absolute SQLite URL (Ray trial processes change their working directory)."""
    if "://" in value:
        return value
    if not value:
        raise ConfigError("params.yaml: key `search.optuna_storage` is empty; give a file path such as "
                          "optuna.db or a database URL such as postgresql://host/optuna")
    return f"sqlite:///{(root / value).resolve()}"


_OPTUNA_KEY = "params.yaml: key `search.optuna_storage`"
_OPTUNA_ALLOWED = ("allowed: an SQLite file path (relative to the root) in an existing writable folder, "
                   "or a database URL such as postgresql://user@host/optuna")
_SQLITE_HEADER = b"SQLite format 3\x00"
_CONNECT_TIMEOUT_S = 10  # a database server that does not answer is refused, not waited on


def check_optuna_storage(root: Path, value: str) -> str:
    """`storage_url(root, value)`, checked before Ray starts by opening it, so a bad storage fails
    now and not when the search's study is copied at its end. An SQLite file must be an SQLite
    database (or not exist yet) in an existing writable folder: its header is read, nothing is
    created. A PostgreSQL URL is connected to and sent SELECT 1 (stores/postgres.py: check_url, at
    most 5 s), any other URL connected to (at most _CONNECT_TIMEOUT_S for MySQL). Refusals are
    one-line ConfigErrors naming the key and what failed; a password is never echoed."""
    from sqlalchemy import create_engine
    from sqlalchemy.engine import make_url

    if any(ord(c) < 32 for c in value):
        raise ConfigError(f"{_OPTUNA_KEY}: {shown(value)} contains control characters; {_OPTUNA_ALLOWED}")
    url = storage_url(root, value)
    try:
        parsed = make_url(url)
        backend = parsed.get_backend_name()
    except Exception as exc:  # noqa: BLE001 - whatever the parser says, the value is not a URL
        raise ConfigError(f"{_OPTUNA_KEY}: {shown(value)} is not a database URL ({_first_line(exc)}); "
                          f"{_OPTUNA_ALLOWED}") from None
    if backend == "sqlite":
        _check_sqlite_file(parsed.database, parsed.render_as_string(hide_password=True))
        return url
    if backend == "postgresql":  # what failed, in words: nothing listening, wrong password, no such database
        check_url(url, _OPTUNA_KEY)
        return url
    safe = parsed.render_as_string(hide_password=True)
    engine = None
    try:
        engine = create_engine(parsed, connect_args=_timeouts(backend))
        with engine.connect():
            pass
    except Exception as exc:  # noqa: BLE001 - a missing driver, DNS, refused login: all the user's to fix
        raise ConfigError(f"{_OPTUNA_KEY}: cannot open {shown(safe, 80)} ({_first_line(exc)}); "
                          f"{_OPTUNA_ALLOWED}") from None
    finally:
        if engine is not None:
            engine.dispose()
    return url


def _timeouts(backend: str) -> dict[str, Any]:
    return {"connect_timeout": _CONNECT_TIMEOUT_S} if backend in ("postgresql", "mysql", "mariadb") else {}


def _first_line(exc: BaseException) -> str:
    text = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    return text if len(text) <= 150 else text[:147] + "..."


def _check_sqlite_file(database: str | None, safe: str) -> None:
    if not database or database == ":memory:" or database.startswith("file:"):
        raise ConfigError(f"{_OPTUNA_KEY}: {shown(safe, 80)} is not a file (an in-memory database keeps nothing); "
                          f"{_OPTUNA_ALLOWED}")
    path = Path(database).resolve()
    folder = path.parent
    if not folder.is_dir() or not os.access(folder, os.W_OK | os.X_OK):
        raise ConfigError(f"{_OPTUNA_KEY}: folder {shown(str(folder), 80)} does not exist or is not writable; "
                          f"{_OPTUNA_ALLOWED}")
    if not path.exists():
        return  # Optuna creates it when the first search ends
    try:
        with path.open("rb") as handle:
            header = handle.read(len(_SQLITE_HEADER))
    except OSError as exc:
        raise ConfigError(f"{_OPTUNA_KEY}: {shown(str(path), 80)} cannot be read ({exc.strerror}); "
                          f"{_OPTUNA_ALLOWED}") from None
    if header and header != _SQLITE_HEADER:  # SQLite treats an empty file as a new database
        raise ConfigError(f"{_OPTUNA_KEY}: {shown(str(path), 80)} exists but is not an SQLite database; "
                          f"{_OPTUNA_ALLOWED}")
    if not os.access(path, os.W_OK):
        raise ConfigError(f"{_OPTUNA_KEY}: {shown(str(path), 80)} is not writable; {_OPTUNA_ALLOWED}")


def study_name(dataset: str, family: str, parent_run_id: str) -> str:
    """One study per search: dataset/family, then the MLflow parent run it belongs to."""
    return f"{dataset}/{family}/{parent_run_id[:12]}"


def create_schema(url: str) -> None:
    """Create Optuna's tables in the database at `url` if it has none. Opening a storage creates
    them, and two threads opening a new PostgreSQL database at once race on the same CREATE TYPE
    (seen: UniqueViolation on `studydirection`, optuna's metadata.create_all is not atomic); so a
    search creates them once before its families' studies are copied in threads."""
    optuna.storages.get_storage(url)


def persist_study(study: optuna.Study, url: str, name: str, attrs: dict[str, Any],
                  trial_attrs: dict[int, dict[str, Any]] | None = None) -> str:
    """Copy the in-memory `study` to `url` as `name` (replacing an earlier copy of the same
    search, e.g. after a resumed search finished); `attrs` become study user attributes,
    `trial_attrs` ({trial number: {key: value}}) user attributes of those trials (e.g. the MLflow
    run id, a failed trial's reason: attributes a finished trial can no longer be given in place,
    so the copy carries them)."""
    storage = optuna.storages.get_storage(url)
    try:
        optuna.delete_study(study_name=name, storage=storage)
    except KeyError:
        pass  # first copy
    target = optuna.create_study(study_name=name, storage=storage, directions=study.directions)
    for key, value in study._storage.get_study_system_attrs(study._study_id).items():  # as optuna.copy_study
        target._storage.set_study_system_attr(target._study_id, key, value)
    for key, value in {**study.user_attrs, **attrs}.items():
        target.set_user_attr(key, value)
    extra = trial_attrs or {}
    for trial in study.get_trials(deepcopy=False):
        template = _with_user_attrs(trial, extra.get(trial.number))
        target._storage.create_new_trial(target._study_id, template_trial=template)
    return name


def _with_user_attrs(trial: FrozenTrial, attrs: dict[str, Any] | None) -> FrozenTrial:
    if not attrs:
        return trial  # the storage copies a template trial
    trial = copy.deepcopy(trial)
    trial.user_attrs = {**trial.user_attrs, **attrs}
    return trial


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
    # Imported here: optuna.importance loads scikit-learn (about 0.9 CPU-s), which every
    # `ctsweep search` would pay at start-up, bad input included, for this end-of-search step.
    from optuna.importance import FanovaImportanceEvaluator, get_param_importances

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
