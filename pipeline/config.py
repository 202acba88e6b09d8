"""params.yaml: its schema, and loading that fails loudly before anything starts.

Each stage reads only its own section (`prepare.<dataset>`, `search`, `final`, `promote`), and
dvc.yaml lists exactly those keys, so changing one reruns only what depends on it. Unknown keys
and wrong types are errors that name the file, the key and what is allowed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal, Union, get_args, get_origin

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from pipeline.errors import ConfigError


class _Strict(BaseModel):
    # extra="forbid": a misspelt key must fail, not be silently ignored.
    model_config = ConfigDict(extra="forbid", strict=False, frozen=True)


class XorParams(_Strict):
    """Bit-stream XOR (Lechner & Hasani 2020): parity of 2-31 random bits."""

    kind: Literal["xor"]
    event_based: bool = True
    n_train: int = Field(2000, gt=10, description="train + validation sequences")
    n_test: int = Field(1000, gt=0)
    val_fraction: float = Field(0.1, gt=0, lt=1)
    seed: int = 1234984


class PrecomputeSpec(_Strict):
    """Model inputs built once in `prepare` (for example log-signature windows) instead of in
    every trial: the family whose `prepare_inputs` builds them, and the arguments it reads."""

    family: str
    args: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _known_family(self) -> "PrecomputeSpec":
        from pipeline.models import MODELS, get_model_class  # late: keeps `import pipeline.config` light

        if self.family not in MODELS:
            raise ValueError(f"unknown family {self.family!r}; valid: {sorted(MODELS)}")
        allowed = get_model_class(self.family).input_arguments
        unknown = sorted(set(self.args) - set(allowed))
        if unknown:
            raise ValueError(f"{unknown} do not change {self.family}'s inputs; allowed: {list(allowed)}")
        return self


class UeaParams(_Strict):
    """A UEA archive dataset: aeon's bundled copy when it ships one, else the archive's zip."""

    kind: Literal["uea"]
    name: str = Field("JapaneseVowels", description="one of the archive's 30 multivariate datasets (uea.py)")
    drop_fraction: float = Field(0.0, ge=0, lt=1, description="observations dropped per series")
    resplit: bool = Field(False, description="pool train+test and split 70/15/15 (Kidger et al.)")
    val_fraction: float = Field(0.2, gt=0, lt=1, description="of train, when not resplit")
    seed: int = Field(56789, description="dropped positions and splits (Kidger et al.'s generator seed)")
    precompute: list[PrecomputeSpec] = Field(default_factory=list)


class SpeechCommandsParams(_Strict):
    """Speech Commands v0.02, the ten keywords, 20 MFCCs of 161 frames (Kidger et al. 2020)."""

    kind: Literal["speech_commands"]
    n_mfcc: int = Field(20, ge=1)
    n_mels: int = Field(64, ge=1)
    n_fft: int = Field(200, ge=16, le=16000, description="window; the hop is n_fft // 2 (torchaudio)")
    seed: int = 0
    precompute: list[PrecomputeSpec] = Field(default_factory=list)

    @model_validator(mode="after")
    def _mfcc_within_mels(self) -> "SpeechCommandsParams":
        if self.n_mfcc > self.n_mels:  # torchaudio.transforms.MFCC refuses this too
            raise ValueError(f"n_mfcc ({self.n_mfcc}) cannot exceed n_mels ({self.n_mels})")
        return self


class SepsisParams(_Strict):
    """PhysioNet/CinC 2019 sepsis prediction, training sets A and B, first 72 hours."""

    kind: Literal["sepsis"]
    intensity: bool = Field(
        False, description="observational intensity (Kidger et al. 2020): cumulative observation counts "
        "of the 34 channels, and Unit1/Unit2-observed static flags")
    max_hours: int = Field(72, ge=1, description="rows up to the first with ICULOS above this are kept")
    seed: int = 0
    precompute: list[PrecomputeSpec] = Field(default_factory=list)


class Physionet2012Params(_Strict):
    """PhysioNet/CinC 2012 in-hospital mortality, set-a with Outcomes-a, first 48 hours."""

    kind: Literal["physionet2012"]
    max_hours: float = Field(48.0, gt=0)
    quantization: float = Field(
        0.016, gt=0, description="hours observation times are rounded to (CfC 0.016; Rubanova 0.1)")
    seed: int = 0
    precompute: list[PrecomputeSpec] = Field(default_factory=list)


class PersonActivityParams(_Strict):
    """UCI Localization Data for Person Activity: 7 merged activities, one label per step."""

    kind: Literal["person_activity"]
    window: int = Field(32, ge=2)
    stride: int = Field(16, ge=1)
    val_fraction: float = Field(0.1, gt=0, lt=1, description="of the reference's 80% train windows")
    seed: int = Field(98841, description="window permutation; 98841 is ODE-LSTM's")


class Walker2dParams(_Strict):
    """Walker2d kinematics (Lechner & Hasani 2020): next-state regression, 17 dims."""

    kind: Literal["walker2d"]
    window: int = Field(64, ge=2)
    stride: int = Field(16, ge=1)
    drop_fraction: float = Field(0.1, ge=0, lt=1)
    seed: int = Field(125487, description="file shuffle before the 75/10/15 split; 125487 is ODE-LSTM's")
    drop_seed: int = Field(891374, description="which steps are dropped; 891374 is ODE-LSTM's")


class ImdbParams(_Strict):
    """IMDB movie-review sentiment (Maas et al. 2011; CfC paper), Keras' tokenised copy."""

    kind: Literal["imdb"]
    vocab_size: int = Field(
        20000, ge=4, description="Keras num_words: ids >= this become OOV (2); CfC train_imdb.py's 20000")
    max_length: int = Field(
        200, ge=1, description="the last max_length tokens of a review are kept (CfC maxlen 200, pad_sequences)")
    embedding_size: int = Field(
        64, ge=1, description="learned embedding in front of every family (CfC tunes embed_dim per model: 32-192)")
    val_fraction: float = Field(0.1, gt=0, lt=1, description="of the 25,000 training reviews")
    seed: int = Field(113, description="Keras load_data's shuffle seed (113, its default), and the validation carve")


DatasetParams = Annotated[
    Union[XorParams, UeaParams, SpeechCommandsParams, SepsisParams, Physionet2012Params,
          PersonActivityParams, Walker2dParams, ImdbParams],
    Field(discriminator="kind"),
]


class Resources(_Strict):
    """What one trial (search) or one seed (final) asks Ray for."""

    cpu: float = Field(1, gt=0, description="CPUs per process (torch threads: their integer part)")
    gpu: float = Field(0, ge=0, description="GPUs per process; fractional values pack several trials on one GPU")
    workers: int = Field(1, ge=1, description="above 1: data-parallel training over this many Ray Train "
                                              "workers, each with `cpu` and `gpu` (search trials only)")

    @model_validator(mode="after")
    def _whole_gpus_above_one(self) -> "Resources":
        if self.gpu > 1 and self.gpu != int(self.gpu):  # Ray refuses fractions above one GPU
            raise ValueError(f"gpu must be at most 1 or a whole number, got {self.gpu}")
        return self


class ResourceOverride(_Strict):
    """Per-family changes to the stage's `resources`: only the keys given replace the defaults."""

    cpu: float | None = Field(None, gt=0)
    gpu: float | None = Field(None, ge=0)
    workers: int | None = Field(None, ge=1)


def _resources_for(base: Resources, overrides: dict[str, ResourceOverride], family: str) -> Resources:
    change = overrides[family].model_dump(exclude_none=True) if family in overrides else {}
    return Resources.model_validate({**base.model_dump(), **change})


def _known_families(overrides: dict[str, ResourceOverride]) -> dict[str, ResourceOverride]:
    from pipeline.models import MODELS  # late: keeps `import pipeline.config` light

    unknown = sorted(set(overrides) - set(MODELS))
    if unknown:
        raise ValueError(f"unknown families {unknown}; valid: {sorted(MODELS)}")
    return overrides


class AshaParams(_Strict):
    grace_period: int = Field(2, ge=1, description="epochs before a trial can be stopped")
    reduction_factor: float = Field(2, gt=1)


class SearchParams(_Strict):
    num_samples: int = Field(4, ge=1, description="trials per (dataset, family), reference included")
    max_concurrent: int = Field(2, ge=1)
    epochs: int = Field(6, ge=1, description="maximum epochs per trial (ASHA's max_t)")
    sampler_seed: int = 0
    n_startup_trials: int = Field(2, ge=0, description="random trials before TPE takes over")
    trial_seed: int = Field(1000, description="training seed of every search trial")
    trial_time_limit_s: float | None = Field(
        None, gt=0, description="wall-clock limit per trial; checked between batches")
    asha: AshaParams = AshaParams()
    resources: Resources = Resources()
    family_resources: dict[str, ResourceOverride] = Field(
        default_factory=dict, description="per-family changes to `resources`, e.g. {cdr_nde_heat: {cpu: 2}}")
    max_failures: int = Field(
        2, ge=0, description="retries of a trial whose process or node died, from its last checkpoint "
                             "(a NaN loss or a solver failure is final and never retried)")
    autoscaling: bool = Field(
        False, description="the cluster adds nodes on demand: do not refuse a request no current node fits")
    optuna_storage: str = Field(
        "optuna.db", description="where each finished search's Optuna study is kept (for optuna-dashboard "
                                 "and the importances): an SQLite file relative to the root, or a database URL")
    storage_path: str = Field(
        "ray_results", description="Ray Tune storage: relative to the root, an absolute path (on a shared "
                                   "filesystem for a multi-node cluster) or a URI such as s3://bucket/ctsweep")

    _family_names = field_validator("family_resources")(_known_families)

    def resources_for(self, family: str) -> Resources:
        """`resources` with the family's overrides applied."""
        return _resources_for(self.resources, self.family_resources, family)


class FinalParams(_Strict):
    seeds: list[int] = Field(default_factory=lambda: [0, 1, 2, 3, 4], min_length=1)
    epochs: int = Field(10, ge=1)
    lr_factors: list[float] = Field(
        default_factory=list, description="robustness: also rerun the best config with its learning rate "
                                          "times each factor, on every seed (e.g. [0.8, 1.25])")
    resources: Resources = Resources()
    family_resources: dict[str, ResourceOverride] = Field(default_factory=dict)

    _family_names = field_validator("family_resources")(_known_families)

    @model_validator(mode="after")
    def _distinct(self) -> "FinalParams":
        if len(set(self.seeds)) != len(self.seeds):
            raise ValueError(f"seeds must be distinct, got {self.seeds}")
        if any(f <= 0 or f == 1 for f in self.lr_factors) or len(set(self.lr_factors)) != len(self.lr_factors):
            raise ValueError(f"lr_factors must be distinct positive factors other than 1 (the best config "
                             f"itself always runs), got {self.lr_factors}")
        if self.resources.workers > 1 or any(o.workers not in (None, 1) for o in self.family_resources.values()):
            raise ValueError("final seeds train in one process each: `workers` must be 1 here "
                             "(the seeds themselves run in parallel)")
        return self

    def resources_for(self, family: str) -> Resources:
        return _resources_for(self.resources, self.family_resources, family)


class PromoteParams(_Strict):
    seeds_required: int = Field(5, ge=1, description="final seeds a family needs to be promoted")
    min_improvement: float = Field(0.0, ge=0, description="margin the candidate must beat the champion by")
    max_p_value: float | None = Field(
        None, gt=0, le=1, description="if set, the candidate must also beat the champion by Welch's t-test "
                                      "on per-seed validation scores at this p-value")


class Params(_Strict):
    datasets: list[str] = Field(min_length=1)
    families: list[str] = Field(min_length=1)
    prepare: dict[str, DatasetParams]
    search: SearchParams = SearchParams()
    final: FinalParams = FinalParams()
    promote: PromoteParams = PromoteParams()

    @model_validator(mode="after")
    def _known_names(self) -> "Params":
        missing = [d for d in self.datasets if d not in self.prepare]
        if missing:
            raise ValueError(
                f"datasets {missing} have no entry under `prepare` (defined: {sorted(self.prepare)})"
            )
        from pipeline.models import MODELS  # late: keeps `import pipeline.config` light

        unknown = [f for f in self.families if f not in MODELS]
        if unknown:
            raise ValueError(f"unknown families {unknown}; valid: {sorted(MODELS)}")
        return self


_KINDS = {
    "xor": XorParams, "uea": UeaParams, "speech_commands": SpeechCommandsParams, "sepsis": SepsisParams,
    "physionet2012": Physionet2012Params, "person_activity": PersonActivityParams, "walker2d": Walker2dParams,
    "imdb": ImdbParams,
}


def _allowed_keys(loc: tuple[Any, ...]) -> list[str]:
    """The keys allowed beside the offending one, found by walking the schema along `loc`."""
    model: Any = Params
    for part in loc[:-1]:
        if part in _KINDS:  # the discriminator tag pydantic puts in the location
            model = _KINDS[part]
        elif isinstance(model, type) and issubclass(model, BaseModel) and part in model.model_fields:
            model = model.model_fields[part].annotation
        elif get_origin(model) is dict:  # a free key such as a family name: its value's model
            model = get_args(model)[1]
        # else: a dataset name under `prepare`; the next tag tells the model
    return sorted(model.model_fields) if isinstance(model, type) and issubclass(model, BaseModel) else []


def _format(err: ValidationError, path: Path) -> str:
    lines = []
    for e in err.errors():
        key = ".".join(str(p) for p in e["loc"] if p not in _KINDS)
        if e["type"] == "extra_forbidden":
            lines.append(f"{path}: unknown key `{key}`; allowed here: {_allowed_keys(e['loc'])}")
            continue
        got = e.get("input")
        shown = "" if isinstance(got, dict) else f" (got {got!r})"
        lines.append(f"{path}: key `{key or '<root>'}`: {e['msg']}{shown}")
    return "\n".join(lines)


def read_yaml(path: Path) -> Any:
    """Parse a YAML file; a missing or malformed file is a ConfigError naming it."""
    if not path.exists():
        raise ConfigError(f"{path} does not exist")
    try:
        return yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from exc


def load_params(path: str | Path) -> Params:
    """Read and validate params.yaml. Raises ConfigError naming the file, key and constraint."""
    path = Path(path)
    data = read_yaml(path)
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping at the top level, got {type(data).__name__}")
    try:
        return Params.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_format(exc, path)) from None


def dataset_params(params: Params, dataset: str) -> Any:
    """The prepare section of one dataset; an unknown name lists the valid ones."""
    if dataset not in params.prepare:
        raise ConfigError(f"unknown dataset {dataset!r}; valid: {sorted(params.prepare)}")
    return params.prepare[dataset]
