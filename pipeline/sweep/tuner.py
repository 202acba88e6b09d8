"""The one Ray Tune run of a dataset's searches: one trainable for every family (the trial's family
picks its context and resources), one FamilySearcher over the families' Optuna searchers and one
FamilyScheduler over their ASHA schedulers, and what Ray keeps of them once the run ends.
"""

from __future__ import annotations

import math
from typing import Any, Callable

from ray import tune
from ray.tune.execution.placement_groups import resource_dict_to_pg_factory

from pipeline.config import Resources, SearchParams
from pipeline.data.contract import Dataset
from pipeline.progress.model import Rungs
from pipeline.sweep.context import TrialContext
from pipeline.sweep.costs import trial_cost
from pipeline.sweep.families import FamilyScheduler, FamilySearcher, family_of
from pipeline.sweep.plans import FamilyPlan
from pipeline.sweep.saturation import Pool
from pipeline.sweep.records import METRIC
from pipeline.sweep.scheduling import HistorySource, ResumableASHA, make_searcher
from pipeline.sweep.trial import run_family_trial

TrialFn = Callable[[dict[str, Any], TrialContext, Dataset], None]  # what a trial process runs


def _resources(res: Resources) -> dict[str, float]:
    if res.workers > 1:  # the trial only drives its Ray Train workers, which ask for their own resources
        from pipeline.sweep.distributed import DRIVER_RESOURCES
        return dict(DRIVER_RESOURCES)
    return {"cpu": res.cpu, "gpu": res.gpu}


def trainable(contexts: dict[str, TrialContext], data: Any, plans: list[FamilyPlan], trial_fn: TrialFn) -> Any:
    """One trainable for every family: the trial's family picks its context and its resources."""
    own = {plan.key: resource_dict_to_pg_factory(_resources(plan.res)) for plan in plans}
    return tune.with_resources(tune.with_parameters(run_family_trial, contexts=contexts, data=data, trial_fn=trial_fn),
                               lambda config: own[family_of(config)])


def _asha_args(p: SearchParams) -> dict[str, Any]:
    return {"max_t": p.epochs, "grace_period": min(p.asha.grace_period, p.epochs),
            "reduction_factor": p.asha.reduction_factor}


def asha_rules(p: SearchParams) -> Rungs:
    """The rules new_tuner's ASHA applies, for the progress estimate (pipeline.progress.asha): the
    rungs below the budget, grace_period x rf^k for k < int(log(max_t / grace) / log(rf)) + 1 as
    Ray's _Bracket builds them (tests/test_progress.py compares with Ray's own); one trial in rf
    goes on past each; the first rounds_in_flight rounds of each study are never stopped."""
    a = _asha_args(p)
    count = int(math.log(a["max_t"] / a["grace_period"]) / math.log(a["reduction_factor"]) + 1)
    rungs = (a["grace_period"] * a["reduction_factor"] ** k for k in range(count))
    epochs = sorted({math.ceil(r - 1e-9) for r in rungs})  # a trial reaches a rung at the first whole epoch >= it
    return Rungs(tuple(e for e in epochs if e < a["max_t"]), 1 / a["reduction_factor"],
                 p.rounds_in_flight * p.round_size, p.repeats)


def saturation_pools(units: list[tuple[str, int]], p: SearchParams) -> dict[tuple[str, int], Pool]:
    """With `search.saturation` on, one Pool per dataset and repeat over its units (in the plans'
    order, params.yaml's), holding num_samples trials per unit, each priced at its family's cost;
    {} when it is off. A unit's key is its family, or "<dataset>/<family>" when datasets share the run."""
    if not p.saturation.enabled:
        return {}
    groups: dict[tuple[str, int], list[tuple[str, int]]] = {}
    for key, repeat in units:
        groups.setdefault((key.rpartition("/")[0], repeat), []).append((key, repeat))
    pools = {}
    for members in groups.values():
        # each trial priced at its family's cost (pipeline.sweep.costs): the budget is the fixed
        # search's num_samples trials of every family, in the same prices
        costs = {unit: trial_cost(unit[0].rpartition("/")[2]) for unit in members}
        pool = Pool(members, p.saturation.min_trials, p.saturation.max_trials, p.num_samples * sum(costs.values()),
                    p.round_size, costs)
        pools.update({unit: pool for unit in members})
    return pools


def unit_seeds(p: SearchParams, repeat: int) -> tuple[int, int]:
    """(sampler seed, trial seed) of a search repeat: repeat 0 is the search as `search` sets it."""
    return p.sampler_seed + repeat, p.trial_seed + repeat


def new_tuner(plans: list[FamilyPlan], contexts: dict[str, TrialContext], data: Any, p: SearchParams, mode: str,
               storage: str, name: str, trial_fn: TrialFn, callbacks: list[tune.Callback] | None = None) -> tune.Tuner:
    """A new Ray Tune run of `plans`' searches; `callbacks`: Tune callbacks of the run
    (pipeline.sweep.early_records)."""
    searchers, schedulers = {}, {}
    for plan in plans:
        ctx = contexts[plan.key]
        for repeat in range(p.repeats):
            unit = (plan.key, repeat)
            searchers[unit] = make_searcher(plan.space.define_by_run(), plan.space.reference_for(ctx.dataset),
                                            METRIC, mode, unit_seeds(p, repeat)[0], p.n_startup_trials, p.epochs)
            schedulers[unit] = ResumableASHA(  # metric, mode: from Tune
                HistorySource(ctx.tracking_uri, ctx.experiment_id, ctx.parent_run_id, METRIC, repeat),
                round_size=p.round_size, rounds_in_flight=p.rounds_in_flight, **_asha_args(p))
    searcher = FamilySearcher(searchers, {unit: p.num_samples for unit in searchers}, p.max_concurrent, METRIC, mode,
                              round_size=p.round_size, rounds_in_flight=p.rounds_in_flight,
                              pools=saturation_pools(list(searchers), p), rise=p.saturation.rise)
    return tune.Tuner(
        trainable(contexts, data, plans, trial_fn),
        # reuse_actors: a trial process (torch, the models and the dataset already loaded) runs the
        # next trial, of any family asking for the same resources, instead of a fresh process
        # importing it all again, seconds per trial here. Not for data-parallel trials: their Ray
        # Train run outlives Tune's 2 s reset window, and the next trial would fail to start in the
        # old process.
        tune_config=tune.TuneConfig(metric=METRIC, mode=mode, num_samples=searcher.total_samples,
                                    scheduler=FamilyScheduler(schedulers), search_alg=searcher,
                                    reuse_actors=all(plan.res.workers == 1 for plan in plans)),
        run_config=tune.RunConfig(
            name=name, storage_path=storage, verbose=0, callbacks=callbacks or None,
            checkpoint_config=tune.CheckpointConfig(num_to_keep=2),
            failure_config=tune.FailureConfig(max_failures=p.max_failures)),
    )


def restored_tuner(path: str, contexts: dict[str, TrialContext], data: Any, plans: list[FamilyPlan],
                   trial_fn: TrialFn) -> tune.Tuner:
    """The Ray experiment at `path` restored: finished trials kept, unfinished ones resumed from
    their last checkpoint, errored ones left as they ended."""
    return tune.Tuner.restore(path, trainable=trainable(contexts, data, plans, trial_fn),
                              resume_unfinished=True, resume_errored=False, restart_errored=False)


def searcher_of(tuner: tune.Tuner) -> FamilySearcher:
    """The FamilySearcher that ran: after Tuner.restore, the one unpickled inside the Tuner, into
    which Ray restored the studies (Ray keeps no public handle on it)."""
    return tuner._local_tuner._tune_config.search_alg


def scheduler_of(tuner: tune.Tuner) -> FamilyScheduler:
    """The FamilyScheduler that ran (after Tuner.restore, the unpickled one), as searcher_of."""
    return tuner._local_tuner._tune_config.scheduler
