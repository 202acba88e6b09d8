"""The final stage's side of the race (`final.race`, decisions in pipeline.final.race): one dataset's
provisional records after each round, and the seed jobs each look asks for.

A family's provisional record is what its final record will say of validation and test, from
its nominal seeds trained so far (kept from an earlier attempt or trained now): the race picks
the best family by the same rule as the report. Families whose record is already current (not
trained in this command) are compared as they stand and never gain seeds; a family whose seed
failed leaves the race. With search repeats the race does not run: the independent unit is then
the repeat, not the seed (pipeline.reporting.tables.test_units).
"""

from __future__ import annotations

import dataclasses
import sys
from typing import Any

from pipeline.final import resume as final_resume
from pipeline.final.counts import mean_loss, split_summary, summed_counts
from pipeline.final.plans import Part, Plan
from pipeline.final.race import Look, look, more_seeds, race_summary


def _nominal(plan: Plan) -> list[Any]:
    return [j for j in plan.jobs if j.lr_factor == 1.0 and j.repeat == 0]


def provisional(plan: Plan, trained: dict[tuple[int, str, int], dict[str, Any]]) -> dict[str, Any] | None:
    """The family's scores so far ({metric, mode, val_mean, val_loss_mean, val_counts?, seeds:
    [{test}]}); None while a nominal seed has no result."""
    by_key = {**plan.kept, **trained}
    keys = [final_resume.seed_key(j.seed, j.lr_factor, j.repeat) for j in _nominal(plan)]
    if any(k not in by_key for k in keys):
        return None
    runs = [by_key[k] for k in keys]
    return {"metric": plan.searched["metric"], "mode": plan.searched["mode"], "status": "ok",
            "val_mean": split_summary(runs, "val")[0], **summed_counts(runs),
            "val_loss_mean": mean_loss(runs),
            "seeds": [{"test": r["test"]} for r in runs]}


class Race:
    """One dataset's race over the command's rounds: its looks and the last one's decisions."""

    def __init__(self, part: Part) -> None:
        self.part = part
        self.p = part.plans[0].p.race if part.plans else None
        self.base = len(part.plans[0].p.seeds) if part.plans else 0
        self.looks = 0
        self.last: Look | None = None
        repeated = any(len(plan.searched.get("repeats", [])) > 1 for plan in part.plans)
        self.on = bool(self.p is not None and self.p.enabled and not repeated)
        if self.p is not None and self.p.enabled and repeated:
            print(f"ctsweep: note: {part.inputs.dataset}: final.race does not run with search repeats (the repeat, "
                  "not the seed, is then the unit compared); the configured seeds only", file=sys.stderr)

    def look(self, trained: dict[tuple[str, str], dict[tuple[int, str, int], dict[str, Any]]],
             failed: dict[tuple[str, str], BaseException]) -> list[Plan]:
        """Look once at the dataset's results after a round; returns the plans given more seed jobs
        (appended to their `jobs`), none when the race is over or off."""
        if not self.on or self.p is None:
            return []
        dataset = self.part.inputs.dataset
        plans = {plan.family: plan for plan in self.part.plans if (dataset, plan.family) not in failed}
        records = {f: r for f, r in self.part.records.items() if r.get("status") != "failed" and f not in plans}
        for family, plan in plans.items():
            record = provisional(plan, trained[(dataset, family)])
            if record is None:
                return []  # a seed still missing (it failed): nothing to decide on
            records[family] = record
        self.last = look(records, self.p, self.base)
        self.looks += 1
        extended = []
        for family in self.last.extend:
            plan = plans.get(family)
            if plan is None:
                continue  # a current record: compared, not retrained
            nominal = _nominal(plan)
            n = min(self.p.seeds_per_round, self.p.max_seeds - len(nominal))
            avoid = [plan.searched.get("trial_seed"), *(r.get("trial_seed") for r in plan.searched.get("repeats", []))]
            seeds = more_seeds([j.seed for j in nominal], n, [s for s in avoid if s is not None])
            plan.jobs.extend(dataclasses.replace(nominal[0], seed=s) for s in seeds)
            extended.append(plan)
        return extended

    def room(self, plan: Plan) -> int:
        """Seeds the race may still add to `plan` (0 when it is off): the progress display's high
        end counts them (pipeline.progress.estimate), whether or not a look asks for them."""
        if not self.on or self.p is None:
            return 0
        return max(0, self.p.max_seeds - len(_nominal(plan)))

    def summary(self) -> dict[str, Any]:
        """The final records' `race` (pipeline.final.race.race_summary); the defaults without plans."""
        if self.p is None:
            return {}
        if not self.on:  # off, or not run beside search repeats: one look with all of alpha
            return race_summary(self.p.model_copy(update={"enabled": False}), self.base, 1, None)
        return race_summary(self.p, self.base, self.looks, self.last)
