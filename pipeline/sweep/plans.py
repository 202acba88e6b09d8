"""Each family's part of a search, checked before Ray starts: its space for the dataset, the
fingerprint of what it searches (a rerun with the same one may resume it), where its record goes,
and what its trials are handed (TrialContext).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pipeline.config import Resources, SearchParams
from pipeline.data.identity import fingerprint as data_fingerprint
from pipeline.models import get_model_class
from pipeline.models import user as user_families
from pipeline.models.blocks.embedding import check_token_family
from pipeline.spaces import (SearchSpace, causal_space, check_corners, check_for_dataset, fix_values, load_space,
                             patience_note, space_path)
from pipeline.spaces.overrides import WHERE as FIXED_BY_RUN
from pipeline.stores import staleness, tracking
from pipeline.stores.files import check_writable
from pipeline.stores.paths import search_result_path
from pipeline.sweep.cluster import is_uri, trial_slots
from pipeline.sweep.context import TrialContext


def storage_location(root: Path, storage_path: str) -> str:
    """Ray Tune's storage: a URI as given, else an absolute path (relative ones from the root)."""
    return storage_path if is_uri(storage_path) else str((root / storage_path).resolve())


def time_limit_key(p: SearchParams, family: str) -> str:
    """The params.yaml key that sets the family's trial time limit: what a user raises when
    every first epoch outruns it."""
    return f"search.family_time_limit_s.{family}" if family in p.family_time_limit_s else "search.trial_time_limit_s"


# Where and how many trials run at once and how often they checkpoint, never what they compute (issue
# 28: a search's results do not depend on them), so changing one neither resumes a different search
# nor makes a result stale. `resources` stays: a trial's CPU count is its torch thread count, which
# changes the arithmetic.
PLACEMENT_KEYS = ("max_concurrent", "autoscaling", "max_failures", "share_datasets", "checkpoint_every_s")


def search_fingerprint(dataset: str, family: str, p: SearchParams, space_file: Path, data_dir: Path,
                       causal: SearchSpace | None = None) -> str:
    """What a search's results depend on: a rerun with the same fingerprint may resume it.
    `causal`: the space as a per-step dataset searches it when causal_space changed it (never
    resume a search whose trials read later steps); None keeps every other fingerprint as it was."""
    code = user_families.code_digest(family)  # a family of the user's: its code too (built-in: the stage's digest)
    # min_steps and rounds_in_flight only when set: a search run before they existed had their
    # defaults (no floor, one round in flight), and its fingerprint stays as it was
    unchanged = ({"min_steps"} if p.min_steps == 1 else set()) | {"fixed"}  # fixed: this family's own, below
    unchanged |= {"rounds_in_flight"} if p.rounds_in_flight == 1 else set()
    unchanged |= {"saturation"} if not p.saturation.enabled else set()  # off: every search as before it existed
    own = p.fixed.get(family)
    adjusted = None if causal is None else {"params": {n: dataclasses.asdict(s) for n, s in causal.params.items()},
                                            "fixed": causal.fixed, "reference": causal.reference}
    blob = json.dumps({"dataset": dataset, "family": family, "params": p.model_dump(exclude=set(PLACEMENT_KEYS) | unchanged),
                       "space": space_file.read_text(), "data": data_fingerprint(data_dir),
                       **({"code": code} if code else {}), **({"causal_space": adjusted} if adjusted else {}),
                       **({"fixed": own} if own else {})},
                      sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


@dataclass
class FamilyPlan:
    """One family's part of a search: checked before Ray starts, filled in as it runs."""

    family: str
    space: SearchSpace
    res: Resources
    fingerprint: str
    out: Path
    digest: str  # the fingerprint with the stage's code: a result stamped with it is current
    parent: str = ""
    resumed: bool = False
    # Its name in the Ray experiment (its units' key, its trials' FAMILY_KEY): the family, or
    # "<dataset>/<family>" when several datasets share the experiment (pipeline.sweep.datasets).
    key: str = ""
    # What the checks changed or noticed (a batch clipped, values fixed by the run): printed once
    # every check of the command has passed (pipeline.sweep.search), so a refusal is its line alone.
    notes: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.key = self.key or self.family


def plan_family(root: Path, dataset: str, family: str, p: SearchParams, meta: Any, data_dir: Path) -> FamilyPlan:
    """Check one family against the dataset before Ray starts (space, tokens, protocol, outputs)."""
    space, causal, notes = checked_space(root, dataset, family, p, meta)
    fp = search_fingerprint(dataset, family, p, space_path(root, family), data_dir, causal)
    out = search_result_path(root, dataset, family)
    check_writable(out.parent)
    return FamilyPlan(family, space, p.resources_for(family), fp, out,
                      staleness.inputs_digest(fp, staleness.code_digest(staleness.SEARCH_CODE)),
                      notes=[f"ctsweep: search: {n}" for n in notes])


def checked_space(root: Path, dataset: str, family: str, p: SearchParams,
                  meta: Any) -> tuple[SearchSpace, SearchSpace | None, list[str]]:
    """The family's space as this run searches it on the dataset (`meta`: its meta.json), checked
    as the search checks it, writing nothing (`ctsweep check` runs it too): (the space, the causal
    space when a per-step task changed it, else None, the notes to print once every check passed).
    ConfigError on the first problem: a token dataset the family cannot read, a value or corner
    of the space the model refuses, a protocol the dataset cannot take."""
    if meta.vocab_size:  # a token dataset: refuse families that cannot read an embedding, before Ray
        check_token_family(family, get_model_class(family), dataset)
    space = load_space(space_path(root, family), family).for_dataset(dataset)  # its fixed values and reference
    notes: list[str | None] = []
    space, note = fix_values(space, p.fixed.get(family, {}))  # this run's protocol for it (a profile's)
    notes.append(note)
    n_train = (meta.sizes or {}).get("train")
    if n_train:  # a batch never exceeds the training split (pipeline/training/budget.py)
        space, note = space.clip_batch(int(n_train), dataset)
        notes.append(note)
    causal = None
    if meta.per_step:  # no configuration reads inputs after the step it predicts (issue 30)
        before = space
        space, note = causal_space(space, dataset)
        notes.append(note)
        causal = space if space is not before else None
    check_for_dataset(space, dataset, meta.task, bool(meta.vocab_size), p.epochs)
    run_fixed = p.fixed.get(family, {})
    check_corners(space, meta.embedding_size if meta.vocab_size else len(meta.channels), meta.output_size,
                  meta.per_step, _where(space, run_fixed), f"checked at the reference and the corners of the space on "
                  f"{dataset}, before any trial")
    notes.append(patience_note(space, p.epochs, f"{FIXED_BY_RUN}.{family}" if "patience" in run_fixed
                               else str(space.path)))
    return space, causal, [n for n in notes if n]


def _where(space: SearchSpace, run_fixed: dict[str, Any]) -> Any:
    """Where a key of the space as searched was set, as check_corners names it: this run's
    `search.fixed`, the file's `fixed`, or its `params` (a corner) or `reference`."""
    def where(key: str, at_end: bool) -> tuple[Path, str]:
        if key in run_fixed:
            return Path(f"{FIXED_BY_RUN}.{space.family}"), key
        if key in space.fixed:
            return space.path, f"fixed.{key}"
        return space.path, f"{'params' if at_end else 'reference'}.{key}"
    return where


def start_limit(p: SearchParams, plans: list[FamilyPlan]) -> int:
    """How many trials Tune may start at once: every family's live-trial cap together, but no
    more than the cluster runs at once (the rest would only wait as placement groups); an
    autoscaling cluster grows, so there only the caps count."""
    # a unit (family, repeat) never has more than its rounds in flight live
    caps = sum(min(p.max_concurrent, p.rounds_in_flight * p.round_size) for _ in plans) * p.repeats
    return caps if p.autoscaling else min(caps, trial_slots([plan.res for plan in plans]))


def trial_contexts(root: Path, dataset: str, p: SearchParams, data_dir: Path, exp_id: str,
              plans: list[FamilyPlan], data_provenance: str = "") -> dict[str, TrialContext]:
    return {plan.key: TrialContext(dataset, plan.family, str(data_dir), p.epochs, p.trial_seed, plan.res.cpu,
                                      tracking.tracking_uri(root), exp_id, plan.parent, p.time_limit_for(plan.family),
                                      plan.res.gpu, plan.res.workers, time_limit_key(p, plan.family),
                                      min_steps=p.min_steps, data_provenance=data_provenance,
                                      checkpoint_every_s=p.checkpoint_every_s)
            for plan in plans}
