"""params.yaml: its schema, and loading that fails loudly before anything starts.

Each stage reads only its own section (`prepare.<dataset>`, `search`, `final`, `promote`), and
dvc.yaml lists exactly those keys, so changing one reruns only what depends on it. Unknown keys
and wrong types are errors that name the file, the key and what is allowed, in one line.

Parsing is strict: `true` is not a number and `'yes'` is not a bool (pydantic's strict mode; an
integer is still accepted where a float is meant), NaN and infinities are refused, every count
of things to run has a generous upper bound (in its description) so a typo cannot ask for 10^24
trials, and dataset and family names are identifiers (pipeline/names.py), checked first.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated, Any, Literal, get_args, get_origin

from pydantic import BaseModel, Field, ValidationError, field_validator, model_validator

from pipeline import names
from pipeline.config.base import MAX_EPOCHS, MAX_STEPS, Name, Seed, _few, _Strict
from pipeline.config.race import RaceParams
from pipeline.config.saturation import SaturationParams, saturation_problem
from pipeline.config.cells import CellBudget, cells_outside, cells_problem
from pipeline.config.resources import ResourceOverride, Resources, resolved_resources
from pipeline.config.datasets import _KINDS, MAX_SEQUENCES, DatasetParams, XorParams
from pipeline.config.limits import (MIN_TRIAL_TIME_LIMIT_S, checked, lr_factor_problem, split_problem, time_limit_problem,
                                    time_limits_problem)
from pipeline.config.yaml_load import MAX_BYTES as MAX_YAML_BYTES, load_yaml
from pipeline.errors import ConfigError

FixedValue = str | bool | int | float  # a value `search.fixed` sets: YAML scalars only
def _known_families(overrides: dict[str, Any]) -> dict[str, Any]:
    from pipeline.models import family_names  # late: keeps `import pipeline.config.params` light

    unknown = sorted(set(overrides) - set(family_names()))
    if unknown:
        raise ValueError(f"unknown families {_few(unknown)}; valid: {family_names()}")
    return overrides


def _fixed_values(fixed: Any) -> Any:
    """search.fixed's values, checked before pydantic's union of scalar types (whose refusal lists
    every type it tried): each a string, true/false or a finite number."""
    if not isinstance(fixed, dict):
        return fixed
    for family, values in fixed.items():
        for key, value in (values.items() if isinstance(values, dict) else ()):
            if isinstance(value, (dict, list, tuple)) or value is None:
                what = "a mapping" if isinstance(value, dict) else "a list" if value is not None else "empty (null)"
                raise ValueError(f"{family}.{key} is {what}; allowed: one value, a number, a string or "
                                 f"true/false (the space searches lists of values; `fixed` sets one)")
            if isinstance(value, float) and not math.isfinite(value):
                raise ValueError(f"{family}.{key} is {value}; allowed: a finite number")
    return fixed


def _distinct(items: list[Any], what: str) -> list[Any]:
    seen = set()
    twice = [i for i in items if i in seen or seen.add(i)]  # type: ignore[func-returns-value]
    if twice:
        raise ValueError(f"{what} must be distinct; listed twice: {_few(twice)}")
    return items


def _counted(low: int, high: int, what: str) -> Any:
    """A validator of a count in [low, high] whose one-line error gives the whole range (issue 29:
    a budget, patience or step floor of 0 names the key and what is allowed, not one bound)."""
    def check(value: int | None) -> int | None:
        if value is not None and not low <= value <= high:
            raise ValueError(f"{value} is not allowed; allowed: an integer from {low} to {high} ({what})")
        return value
    return check


MAX_TRIALS = 100_000
MAX_REPEATS = 20
DEFAULT_ROUND = 2  # the default profile's: pipeline/sweep/families.py says what a round is
MAX_ROUNDS_IN_FLIGHT = 8  # more would make TPE little more than its random start-up trials


class AshaParams(_Strict):
    """ASHA, which stops a search's weaker trials early (Ray Tune's ASHAScheduler; max_t: `search.epochs`)."""

    grace_period: int = Field(2, ge=1, le=MAX_EPOCHS, description="epochs before a trial can be stopped")
    reduction_factor: float = Field(2, gt=1, le=1000, description="rungs at grace_period x reduction_factor^k epochs; "
                                    "the best 1/reduction_factor of the trials at a rung go on")


class SearchParams(_Strict):
    """The search stage (`ctsweep search`): Optuna's TPE proposes each family's trials, ASHA stops the weaker."""

    num_samples: int = Field(4, ge=1, le=MAX_TRIALS, description=f"trials per (dataset, family), reference "
                                                                 f"included (at most {MAX_TRIALS})")
    max_concurrent: int = Field(2, ge=1, le=1024, description="at most 1024")
    epochs: int = Field(6, description=f"maximum epochs per trial (ASHA's max_t; 1 to {MAX_EPOCHS})")
    min_steps: int = Field(
        1, description=f"optimiser steps a trial takes at least over its `epochs` (1 to {MAX_STEPS}; "
        "1: one pass per epoch): on a small training split or with large batches an epoch is lengthened to whole "
        "passes until `epochs` epochs make this many steps (pipeline/training/budget.py)")
    sampler_seed: Seed = 0
    n_startup_trials: int = Field(2, ge=0, le=MAX_TRIALS, description="random trials before TPE takes over")
    trial_seed: Seed = Field(1000, description="training seed of every search trial")
    round_size: int = Field(
        DEFAULT_ROUND, ge=1, le=MAX_TRIALS, description="trials a family's study proposes together; it learns from "
        "them (and ASHA compares with them) only once the whole round has ended, so no decision depends on the order "
        f"in which results arrive (1 to num_samples; left out: {DEFAULT_ROUND}, or num_samples if fewer)")
    rounds_in_flight: int = Field(
        1, ge=1, le=MAX_ROUNDS_IN_FLIGHT, description=f"rounds of a family's study live at once (1 to {MAX_ROUNDS_IN_FLIGHT}"
        "): round k is proposed from, and judged by ASHA against, rounds 0 to k - rounds_in_flight; 2: no slot waits "
        "for a round's slowest trial, TPE learns a round later; the same at any concurrency (pipeline/sweep/families.py)")
    repeats: int = Field(
        1, ge=1, le=MAX_REPEATS, description=f"independent searches per family (1 to {MAX_REPEATS}), repeat r with "
        "sampler_seed + r and trial_seed + r; the final stage trains each repeat's best on every seed")
    trial_time_limit_s: float | None = Field(
        None, gt=0, le=7 * 86400, description="wall-clock limit per trial (1 s to a week; at least one epoch of "
        "the family's reference, as `ctsweep search` measures it); checked between batches")
    checkpoint_every_s: float = Field(
        30.0, ge=0, le=86400, description="a trial saves a checkpoint (what Ray restarts it from when its process, "
        "its node or the driver dies) at the end of an epoch only when this many seconds have passed since its last "
        "one (0: after every epoch; at most a day): a restarted trial trains again at most this long. Every epoch is "
        "still reported to ASHA and logged to MLflow; data-parallel trials checkpoint every epoch")
    family_time_limit_s: dict[Name, Annotated[float, Field(gt=0, le=7 * 86400)]] = Field(
        default_factory=dict, description="per-family `trial_time_limit_s`, e.g. {ode_rnn_tw: 120} (a slow family's "
                                          "trials need more time for the same epochs)")
    asha: AshaParams = AshaParams()
    saturation: SaturationParams = Field(SaturationParams(), description="searches that go on while they still "
                                         "gain (pipeline/config/saturation.py): `enabled`, `min_trials`, `max_trials`, "
                                         "`rise`")
    resources: Resources = Resources()
    family_resources: dict[Name, ResourceOverride] = Field(default_factory=dict)
    fixed: dict[Name, dict[Name, FixedValue]] = Field(
        default_factory=dict, description="per family, values fixed in this run over its space's reference and fixed "
        "values, no longer searched, e.g. {ode_rnn: {optimizer: rmsprop, lr: 0.005}} (a paper's protocol for its "
        "baselines in a reproduction profile; pipeline/spaces/overrides.py)")
    max_failures: int = Field(
        2, ge=0, le=100, description="at most 100 retries of a trial whose process or node died, from its last checkpoint "
                             "(a NaN loss or a solver failure is final and never retried)")
    share_datasets: bool = Field(
        True, description="`ctsweep search DATASET` (what `dvc repro` runs) also takes on the out-of-date families of "
        "params.yaml's other datasets whose data is prepared, all in one Ray run sharing the cluster's slots; their "
        "own stages then find them current. Results do not depend on it")
    autoscaling: bool = Field(
        False, description="the cluster adds nodes on demand: do not refuse a request no current node fits")
    optuna_storage: str = Field(
        "optuna.db", min_length=1, max_length=4096, description="where each finished search's Optuna study is kept (for optuna-dashboard "
                                 "and the importances): an SQLite file relative to the root, or a database URL")
    storage_path: str = Field(
        "ray_results", min_length=1, max_length=4096, description="Ray Tune storage: relative to the root, an absolute path (on a shared "
                                   "filesystem for a multi-node cluster) or a URI such as s3://bucket/ctsweep")

    _family_names = field_validator("family_resources", "family_time_limit_s", "fixed")(_known_families)
    _fixed = field_validator("fixed", mode="before")(_fixed_values)
    _epochs = field_validator("epochs")(_counted(1, MAX_EPOCHS, "the most epochs a trial trains"))
    _min_steps = field_validator("min_steps")(_counted(1, MAX_STEPS, "1: one pass over the training split per epoch"))
    _time_limit = field_validator("trial_time_limit_s")(checked(time_limit_problem))
    _time_limits = field_validator("family_time_limit_s")(checked(time_limits_problem))

    @model_validator(mode="after")
    def _rungs(self) -> "SearchParams":
        # ASHA's first rung is at grace_period epochs; past max_t (`epochs`) there is no rung at all.
        if self.asha.grace_period > self.epochs:
            raise ValueError(f"asha.grace_period is {self.asha.grace_period}, more than search.epochs "
                             f"({self.epochs}): ASHA cannot split that budget into rungs; allowed: 1 to {self.epochs} "
                             f"(equal to `epochs`: no early stops)")
        if self.round_size > self.num_samples:
            raise ValueError(f"search.round_size is {self.round_size}, more than search.num_samples "
                             f"({self.num_samples}): a round cannot hold more trials than the search; allowed: 1 "
                             f"to {self.num_samples}")
        if problem := saturation_problem(self.saturation, self.num_samples, self.round_size):
            raise ValueError(problem)
        return self

    @model_validator(mode="before")
    @classmethod
    def _default_round(cls, data: Any) -> Any:
        # Left out, the round is DEFAULT_ROUND trials, or the whole search when it has fewer.
        samples = data.get("num_samples", cls.model_fields["num_samples"].default) if isinstance(data, dict) else None
        if isinstance(data, dict) and "round_size" not in data and type(samples) is int and samples >= 1:
            return {**data, "round_size": min(DEFAULT_ROUND, samples)}
        return data

    def resources_for(self, family: str) -> Resources:
        """`resources` with the family's overrides applied."""
        return resolved_resources(self.resources, self.family_resources, family)

    def time_limit_for(self, family: str) -> float | None:
        """The family's wall-clock limit per trial (`family_time_limit_s`, else `trial_time_limit_s`)."""
        return self.family_time_limit_s.get(family, self.trial_time_limit_s)


class FinalParams(_Strict):
    """The final stage (`ctsweep final`): each family's best searched configuration retrained on every seed."""

    seeds: list[Seed] = Field(default_factory=lambda: [0, 1, 2, 3, 4], min_length=1, max_length=100,
                              description="at most 100 distinct seeds")
    epochs: int = Field(10, description="maximum epochs per seed (early stopping may end it "
                                                             "sooner); the best validation epoch's weights are kept")
    patience: int | None = Field(
        None, description="a seed stops after this many epochs without a better validation score "
                                             "(at most `epochs`; null, the default: every epoch runs); a family whose "
                                             "searched configuration sets its own `patience` (its paper's protocol) keeps it")
    min_steps: int = Field(
        1, description=f"optimiser steps a seed takes at least over its `epochs` (1 to {MAX_STEPS}; "
        "1: one pass per epoch): on a small training split or with large batches an epoch is lengthened to whole "
        "passes until `epochs` epochs make this many steps, and `patience` counts those longer epochs")
    time_limit_s: float | None = Field(
        None, gt=0, le=7 * 86400, description="wall-clock cap per seed in seconds (at most a week), checked before "
                                              "each epoch: none starts that would end past it at the slowest "
                                              "epoch's length; it must allow at least one epoch as the search "
                                              "measured it")
    lr_factors: list[float] = Field(
        default_factory=list, max_length=16, description="robustness: also rerun the best config with its learning "
        "rate times each factor (at most 16, each from 0.1 to 10), on every seed (e.g. [0.8, 1.25])")
    validation: Literal["prepared", "per_seed"] = Field(
        "prepared", description="which validation series a seed keeps its epoch and stops by: `prepared` (the "
        "prepared split, the same for every seed) or `per_seed` (each seed redraws as many from the training and "
        "validation series together, stratified, with its own seed; the test split untouched)")
    resources: Resources = Resources()
    family_resources: dict[Name, ResourceOverride] = Field(default_factory=dict)
    share_datasets: bool = Field(
        True, description="`ctsweep final DATASET` (what `dvc repro` runs) also takes on the out-of-date families of "
        "params.yaml's other datasets whose data is prepared, all in one Ray run sharing the cluster's slots; their "
        "own stages then find them current. Results do not depend on it")
    family_epochs: dict[Name, Annotated[int, Field(ge=1, le=MAX_EPOCHS)]] = Field(
        default_factory=dict, description="per-family epochs instead of `epochs`, e.g. {cf_s: 116, cfc: 57} "
                                          "(a paper's table that trains each model for its own number of epochs)")
    cells: dict[str, CellBudget] = Field(
        default_factory=dict, max_length=10_000, description="per (dataset, family) budgets over the above, keyed "
        "`<dataset>/<family>`: `epochs`, `patience`, `min_steps` (pipeline/config/cells.py)")
    race: RaceParams = Field(RaceParams(), description="seeds added until the comparison is decided "
                             "(pipeline/config/race.py): `enabled`, `margin`, `max_seeds`, `seeds_per_round`, `alpha`")

    _family_names = field_validator("family_resources", "family_epochs")(_known_families)
    _epochs = field_validator("epochs")(_counted(1, MAX_EPOCHS, "the most epochs a seed trains"))
    _patience = field_validator("patience")(_counted(1, MAX_EPOCHS, "epochs without progress; null: no early stopping"))
    _min_steps = field_validator("min_steps")(_counted(1, MAX_STEPS, "1: one pass over the training split per epoch"))

    @model_validator(mode="after")
    def _distinct(self) -> "FinalParams":
        if len(set(self.seeds)) != len(self.seeds):
            raise ValueError(f"seeds must be distinct, got {_few(self.seeds, 10)}")
        if any(f <= 0 or f == 1 for f in self.lr_factors) or len(set(self.lr_factors)) != len(self.lr_factors):
            raise ValueError(f"lr_factors must be distinct positive factors other than 1 (the best config "
                             f"itself always runs), got {_few(self.lr_factors, 16)}")
        if problem := lr_factor_problem(self.lr_factors):  # pipeline/config/limits.py says why
            raise ValueError(problem)
        if problem := cells_problem(self.cells, self.for_cell):
            raise ValueError(problem)
        shortest = min([self.epochs, *self.family_epochs.values()])
        if self.patience is not None and self.patience > shortest:
            raise ValueError(f"patience is {self.patience}, more than the {shortest} epochs a seed may train "
                             f"(`epochs` or `family_epochs`); allowed: 1 to {shortest}, or null for no early stopping")
        if self.race.enabled and self.race.max_seeds < len(self.seeds):
            raise ValueError(f"race.max_seeds is {self.race.max_seeds}, below the {len(self.seeds)} configured "
                             f"`seeds`; allowed: {len(self.seeds)} to 100")
        if self.resources.workers > 1 or any(o.workers not in (None, 1) for o in self.family_resources.values()):
            raise ValueError("final seeds train in one process each: `workers` must be 1 here "
                             "(the seeds themselves run in parallel)")
        return self

    def resources_for(self, family: str) -> Resources:
        return resolved_resources(self.resources, self.family_resources, family)

    def for_family(self, family: str) -> "FinalParams":
        """These params with `epochs` set to the family's (`family_epochs`, else `epochs`)."""
        return self.model_copy(update={"epochs": self.family_epochs.get(family, self.epochs)})

    def for_cell(self, dataset: str, family: str) -> "FinalParams":
        """for_family's params with the cell's own `final.cells` budget over them, where it has one."""
        own = self.for_family(family)
        cell = self.cells.get(f"{dataset}/{family}")
        return own if cell is None else own.model_copy(update=cell.model_dump(exclude_none=True))


class PromoteParams(_Strict):
    """The rule `ctsweep promote` applies: when a dataset's candidate replaces its champion."""

    seeds_required: int = Field(5, ge=1, le=100, description="final seeds a family needs to be promoted "
                                                             "(at most the number of `final.seeds`)")
    min_improvement: float = Field(0.0, ge=0, description="margin the candidate must beat the champion by")
    max_p_value: float | None = Field(
        None, gt=0, le=1, description="if set, the candidate must also beat the champion by Welch's t-test "
                                      "on per-seed validation scores at this p-value")


class ClassicalParams(_Strict):
    """The classical reference (pipeline/classical): one aeon classifier per dataset, on one core."""

    # At least a second, as a search trial's limit (limits.MIN_TRIAL_TIME_LIMIT_S): 0.001 was
    # accepted here and failed the classifier once it ran, while the search refused it at load.
    time_limit_s: float = Field(600, ge=MIN_TRIAL_TIME_LIMIT_S, le=7 * 86400,
                                description="seconds its training and prediction may take (1 s to a week); past "
                                            "it the reference is reported as failed")
    seed: Seed = Field(0, description="MiniRocket's random kernels")


class Params(_Strict):
    datasets: list[Name] = Field(min_length=1, max_length=1000, description="distinct, at most 1000")
    families: list[Name] = Field(min_length=1, max_length=1000, description="distinct registry names")
    prepare: dict[Name, DatasetParams] = Field(max_length=1000, description="each dataset's source and "
                                               "preprocessing, keyed by its name; one section per `kind` below")
    search: SearchParams = SearchParams()
    final: FinalParams = FinalParams()
    promote: PromoteParams = PromoteParams()
    classical: ClassicalParams = ClassicalParams()
    # name -> "package.module:Class" or {model, space}: read and imported before the rest is
    # validated (pipeline/models/user.py), so `families` and the per-family keys may name them.
    user_families: dict[Name, Any] = Field(
        default_factory=dict, max_length=1000, description="families of your own: name -> `package.module:Class` "
        "(space: search_spaces/<name>.yaml) or {model, space}, importable from the project root; `families` may "
        "then name them (pipeline/models/user.py, docs/how-to/own-model.md)")

    _distinct_datasets = field_validator("datasets")(lambda v: _distinct(v, "datasets"))
    _distinct_families = field_validator("families")(lambda v: _distinct(v, "families"))

    @model_validator(mode="after")
    def _known_names(self) -> "Params":
        missing = [d for d in self.datasets if d not in self.prepare]
        if missing:
            raise ValueError(
                f"datasets {_few(missing)} have no entry under `prepare` (defined: {_few(sorted(self.prepare), 30)})"
            )
        from pipeline.models import family_names  # late: keeps `import pipeline.config.params` light

        unknown = [f for f in self.families if f not in family_names()]
        if unknown:
            raise ValueError(f"unknown families {_few(unknown)}; valid: {family_names()} (a family of your own: "
                             "`user_families`, docs/how-to/own-model.md)")
        for name, p in self.prepare.items():  # generated data: its sizes are params (pipeline/config/limits.py)
            if isinstance(p, XorParams) and (
                    problem := split_problem(name, p.n_train, p.val_fraction, p.n_test, MAX_SEQUENCES)):
                raise ValueError(problem)
        if problem := cells_outside(self.final.cells, self.datasets, self.families):
            raise ValueError(problem)
        if self.promote.seeds_required > len(self.final.seeds):  # no family could ever be promoted
            raise ValueError(f"promote.seeds_required is {self.promote.seeds_required} but final.seeds lists only "
                             f"{len(self.final.seeds)}; allowed: at most the number of final seeds")
        return self


def _schema_loc(loc: tuple[Any, ...]) -> tuple[Any, ...]:
    """`loc` without the discriminator tag pydantic inserts after a dataset name under `prepare`
    (only there: a dataset may itself be called `xor`)."""
    if len(loc) > 2 and loc[0] == "prepare" and loc[2] in _KINDS:
        return loc[:2] + loc[3:]
    return loc


def _allowed_keys(loc: tuple[Any, ...]) -> list[str]:
    """The keys allowed beside the offending one, found by walking the schema along `loc`."""
    model: Any = Params
    for i, part in enumerate(loc[:-1]):
        if i == 2 and loc[0] == "prepare" and part in _KINDS:  # the discriminator tag
            model = _KINDS[part]
        elif isinstance(model, type) and issubclass(model, BaseModel) and part in model.model_fields:
            model = model.model_fields[part].annotation
        elif get_origin(model) is dict:  # a free key such as a family name: its value's model
            model = get_args(model)[1]
        elif get_origin(model) is list:  # an index into a list of models (precompute)
            model = get_args(model)[0]
        # else: a dataset name under `prepare`; the next tag tells the model
    return sorted(model.model_fields) if isinstance(model, type) and issubclass(model, BaseModel) else []


def _key(loc: tuple[Any, ...]) -> str:
    """A location as a dotted key; a bad key itself is not echoed (it is in the message, shortened)."""
    if "[key]" in loc:
        loc = loc[: loc.index("[key]") - 1]
    return ".".join(str(p) if isinstance(p, int) or names.is_name(p) else names.shown(p, 30) for p in loc)


def _problem(e: Any) -> str:
    msg = str(e["msg"]).removeprefix("Value error, ")
    got = e.get("input")
    for echoed in (got, (e.get("ctx") or {}).get("tag")):  # pydantic echoes some inputs (tags) whole
        if isinstance(echoed, str) and len(echoed) > 40:
            msg = msg.replace(repr(echoed), names.shown(echoed)).replace(echoed, names.shown(echoed))
    if e["type"] != "value_error" and not isinstance(got, dict) and "[key]" not in e["loc"]:
        msg += f" (got {names.shown(got)})"
    return msg


MAX_PROBLEMS = 3  # named in the one line; the rest are counted


def _format(err: ValidationError, path: Path) -> str:
    """One line: the file, then up to MAX_PROBLEMS of `key: what is wrong; what is allowed`."""
    parts = []
    errors = err.errors()
    for e in errors[:MAX_PROBLEMS]:
        loc = _schema_loc(e["loc"])
        if e["type"] == "extra_forbidden":
            parts.append(f"unknown key `{_key(loc)}`; allowed here: {_allowed_keys(e['loc'])}")
        else:
            parts.append(f"key `{_key(loc)}`: {_problem(e)}" if _key(loc) else _problem(e))
    more = f" (and {len(errors) - MAX_PROBLEMS} more)" if len(errors) > MAX_PROBLEMS else ""
    line = " ".join(f"{path}: {'; '.join(parts)}{more}".split())  # never more than one line
    return line if len(line) <= 2000 else line[:1997] + "..."


def read_yaml(path: Path, max_bytes: int = MAX_YAML_BYTES) -> Any:
    """Parse a YAML file strictly (pipeline/config/yaml_load.py); any problem is a one-line ConfigError."""
    return load_yaml(Path(path), max_bytes)


def load_params(path: str | Path) -> Params:
    """Read and validate params.yaml. Raises ConfigError naming the file, key and constraint."""
    path = Path(path)
    return params_from(read_yaml(path), path)


def params_from(data: Any, path: Path) -> Params:
    """Validate params read from `path` (a file, or what errors should name). Raises ConfigError."""
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping of sections at the top level, got {type(data).__name__}; "
                          f"allowed keys: {sorted(Params.model_fields)}")
    from pipeline.models.user import register_project  # late: imports the model zoo

    register_project(data.get("user_families"), path.parent.resolve(), path)
    try:
        return Params.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_format(exc, path)) from None


def dataset_params(params: Params, dataset: str) -> Any:
    """The prepare section of one dataset; an unknown name lists the valid ones."""
    if dataset not in params.prepare:
        raise ConfigError(f"unknown dataset {names.shown(dataset)}; valid: {sorted(params.prepare)}")
    return params.prepare[dataset]
