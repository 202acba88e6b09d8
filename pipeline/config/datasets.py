"""The `prepare.<dataset>` sections of params.yaml: one model per dataset kind (`kind:` picks it).

Each bounds its counts and sizes (a typo cannot ask for 10^12 sequences) and names its source
(paper, reference code) where a default comes from one.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, Optional, Union

from pydantic import Field, field_validator, model_validator

from pipeline.config.base import Name, Seed, _few, _Strict


MAX_SEQUENCES = 10_000_000  # a bound on generated or kept sequences: far above any dataset here
MAX_STEPS = 1_000_000  # a bound on window and sequence lengths
MAX_PRECOMPUTE = 64  # precomputed input variants per dataset
KIND = "the dataset kind: it picks which keys the section takes (pipeline/data/kinds/)"


class XorParams(_Strict):
    """Bit-stream XOR (Lechner & Hasani 2020): parity of 2-31 random bits."""

    kind: Literal["xor"] = Field(description=KIND)
    event_based: bool = Field(True, description="a step at the first bit, at each change and at the stream's end, "
                              "so elapsed times carry the run lengths; false: one step per bit (dense)")
    n_train: int = Field(2000, gt=10, le=MAX_SEQUENCES, description="train + validation sequences (at most 10^7)")
    n_test: int = Field(1000, gt=0, le=MAX_SEQUENCES, description="at most 10^7")
    val_fraction: float = Field(0.1, gt=0, lt=1, description="of the n_train sequences, held out for validation")
    seed: Seed = 1234984


class PrecomputeSpec(_Strict):
    """Model inputs built once in `prepare` (for example log-signature windows) instead of in
    every trial: the family whose `prepare_inputs` builds them, and the arguments it reads."""

    family: Name = Field(description="the family whose `prepare_inputs` builds the inputs")
    args: dict[str, Any] = Field(
        default_factory=dict, description="values of the family's `input_arguments` to build them with, e.g. "
        "{logsig_depth: 2, logsig_step: 4}; one left out takes its default")

    @model_validator(mode="after")
    def _known_family(self) -> "PrecomputeSpec":
        from pipeline.config.arguments import argument_problem
        from pipeline.models import family_names, get_model_class  # late: keeps `import pipeline.config.params` light
        from pipeline.models.base import model_arguments

        if self.family not in family_names():
            raise ValueError(f"unknown family {self.family!r}; valid: {family_names()}")
        cls = get_model_class(self.family)
        allowed = cls.input_arguments
        unknown = sorted(set(self.args) - set(allowed))
        if unknown:
            raise ValueError(f"{_few(unknown)} do not change {self.family}'s inputs; allowed: {list(allowed)}")
        arguments = model_arguments(cls)
        for key, value in self.args.items():
            problem = argument_problem(arguments[key], value)
            if problem:
                raise ValueError(f"args.{key}: {problem}")
        try:  # the family's own checks of its arguments (a depth it has no formula for), as prepare would meet them
            cls(input_channels=1, output_size=1, **self.args)
        except ValueError as exc:
            reason = " ".join(str(exc).split())
            raise ValueError(f"args: {reason if len(reason) <= 200 else reason[:197] + '...'}") from None
        return self


class UeaParams(_Strict):
    """A UEA archive dataset: aeon's bundled copy when it ships one, else the archive's zip."""

    kind: Literal["uea"] = Field(description=KIND)
    name: str = Field("JapaneseVowels", description="any UCR univariate or UEA multivariate dataset aeon lists (uea.py)")
    drop_fraction: float = Field(0.0, ge=0, lt=1, description="observations dropped per series")
    resplit: bool = Field(False, description="pool train+test and split 70/15/15 (Kidger et al.)")
    val_fraction: float = Field(0.2, gt=0, lt=1, description="of train, when not resplit")
    seed: Seed = Field(56789, description="dropped positions and splits (Kidger et al.'s generator seed)")
    precompute: list[PrecomputeSpec] = Field(default_factory=list, max_length=MAX_PRECOMPUTE)


class SpeechCommandsParams(_Strict):
    """Speech Commands v0.02, the ten keywords, 20 MFCCs of 161 frames (Kidger et al. 2020)."""

    kind: Literal["speech_commands"] = Field(description=KIND)
    n_mfcc: int = Field(20, ge=1, le=256, description="MFCCs per frame, the input channels (at most n_mels)")
    n_mels: int = Field(64, ge=1, le=1024, description="mel filterbank bands the MFCCs are computed from")
    n_fft: int = Field(200, ge=16, le=16000, description="window; the hop is n_fft // 2 (torchaudio)")
    seed: Seed = 0
    precompute: list[PrecomputeSpec] = Field(default_factory=list, max_length=MAX_PRECOMPUTE)

    @model_validator(mode="after")
    def _mfcc_within_mels(self) -> "SpeechCommandsParams":
        if self.n_mfcc > self.n_mels:  # torchaudio.transforms.MFCC refuses this too
            raise ValueError(f"n_mfcc ({self.n_mfcc}) cannot exceed n_mels ({self.n_mels})")
        return self


class SepsisParams(_Strict):
    """PhysioNet/CinC 2019 sepsis prediction, training sets A and B, first 72 hours."""

    kind: Literal["sepsis"] = Field(description=KIND)
    intensity: bool = Field(
        False, description="observational intensity (Kidger et al. 2020): cumulative observation counts "
        "of the 34 channels, and Unit1/Unit2-observed static flags")
    max_hours: int = Field(72, ge=1, le=100_000, description="rows up to the first with ICULOS above this are kept")
    task: Literal["stay", "hourly"] = Field(
        "stay", description="stay: one label per stay, SepsisLabel ever 1 in the kept rows (Kidger et al. 2020); "
        "hourly: the challenge's SepsisLabel at every kept hour, one label per step (Kohan et al. 2022, Table 5)")
    seed: Seed = 0
    precompute: list[PrecomputeSpec] = Field(default_factory=list, max_length=MAX_PRECOMPUTE)


PHYSIONET2012_SETS = ("a", "b", "c")  # all three published with their outcomes (pipeline/data/kinds/physionet2012.py)


class Physionet2012Params(_Strict):
    """PhysioNet/CinC 2012 in-hospital mortality: set-a with Outcomes-a (and sets b, c when listed), first 48 hours."""

    kind: Literal["physionet2012"] = Field(description=KIND)
    sets: list[Literal["a", "b", "c"]] = Field(
        default_factory=lambda: ["a"], min_length=1, max_length=len(PHYSIONET2012_SETS),
        description="the challenge's sets to fetch and pool, each with its Outcomes file: [a] (4,000 stays; CfC, "
        "Hasani et al. 2022) or up to [a, b, c] (12,000 stays; Kohan et al.)")
    max_hours: float = Field(48.0, gt=0, le=100_000, description="measurements later than this many hours after "
                             "admission are dropped")
    quantization: float = Field(
        0.016, gt=0, le=100_000, description="hours observation times are rounded to (CfC 0.016; Rubanova 0.1)")
    seed: Seed = 0
    scaling: Literal["standard", "min_max"] = Field(
        "standard", description="how channels are scaled with training statistics: `standard` ((x - mean) / std, "
        "every dataset's) or `min_max` ((x - min) / max, the CfC and latent ODE code's PhysioNet scaling)")
    precompute: list[PrecomputeSpec] = Field(default_factory=list, max_length=MAX_PRECOMPUTE)

    @field_validator("sets")
    @classmethod
    def _each_set_once(cls, sets: list[str]) -> list[str]:
        twice = sorted({s for s in sets if sets.count(s) > 1})
        if twice:  # record IDs are unique across the sets: a set listed twice would pool each stay twice
            raise ValueError(f"lists {_few(twice)} more than once; allowed: each of {list(PHYSIONET2012_SETS)} "
                             f"at most once")
        return sets


# The person_activity defaults that differ between variants; `odelstm`'s are the fields' own.
# rubanova: YuliaRubanova/latent_ode person_activity.py (max_seq_length = 50, slide =
# max_seq_length // 2) and lib/parse_datasets.py (train_test_split(..., random_state=42)).
_RUBANOVA_DEFAULTS = {"window": 50, "seed": 42}


class PersonActivityParams(_Strict):
    """UCI Localization Data for Person Activity: 7 merged activities, one label per step.

    `variant` picks the preprocessing (pipeline/data/kinds/person_activity.py): `odelstm` (ODE-LSTM's
    rows, one-hot tag + x, y, z, windows of 32) or `rubanova` (Latent ODE's 10 ms bins of the four
    tags' 12 coordinates, chunks of 50). A key left out takes its variant's default.
    """

    kind: Literal["person_activity"] = Field(description=KIND)
    variant: Literal["odelstm", "rubanova"] = Field(
        "odelstm", description="odelstm: Lechner & Hasani 2020 (CfC, CDR-NDE); rubanova: Rubanova et al. 2019 "
        "(Temporal Weights, Kohan et al. 2022)")
    window: int = Field(32, ge=2, le=MAX_STEPS, description="steps per window; rubanova: 50")
    stride: int = Field(16, ge=1, le=MAX_STEPS, description="rubanova: window // 2")
    val_fraction: float = Field(0.1, gt=0, lt=1, description="of the reference's 80% train windows")
    seed: Seed = Field(98841, description="window permutation; 98841 is ODE-LSTM's, rubanova: 42 (Latent ODE's)")

    @model_validator(mode="before")
    @classmethod
    def _variant_defaults(cls, data: Any) -> Any:
        # Before validation, so a key given in params.yaml always wins and the fields stay plain ints.
        if not isinstance(data, dict) or data.get("variant") != "rubanova":
            return data
        filled = {**_RUBANOVA_DEFAULTS, **data}
        window = filled["window"]
        if "stride" not in filled and isinstance(window, int) and not isinstance(window, bool):
            filled["stride"] = max(window // 2, 1)  # Rubanova's slide = max_seq_length // 2
        return filled


class Walker2dParams(_Strict):
    """Walker2d kinematics (Lechner & Hasani 2020): next-state regression, 17 dims."""

    kind: Literal["walker2d"] = Field(description=KIND)
    window: int = Field(64, ge=2, le=MAX_STEPS, description="kept steps per window; 64 is ODE-LSTM's")
    stride: int = Field(16, ge=1, le=MAX_STEPS, description="kept steps between window starts; 16 is ODE-LSTM's")
    drop_fraction: float = Field(0.1, ge=0, lt=1, description="share of simulation steps dropped at random (the "
                                 "irregular sampling); 0.1 is ODE-LSTM's")
    seed: Seed = Field(125487, description="file shuffle before the 75/10/15 split; 125487 is ODE-LSTM's")
    drop_seed: Seed = Field(891374, description="which steps are dropped; 891374 is ODE-LSTM's")
    scaling: Literal["standard", "raw"] = Field(
        "standard", description="the inputs: `standard` (train mean and std, every dataset's) or `raw` (the "
        "simulator's units, as the CfC and ODE-LSTM authors' code feeds them); targets are raw either way")


class ImdbParams(_Strict):
    """IMDB movie-review sentiment (Maas et al. 2011; CfC paper), Keras' tokenised copy."""

    kind: Literal["imdb"] = Field(description=KIND)
    vocab_size: int = Field(
        20000, ge=4, le=10_000_000, description="Keras num_words: ids >= this become OOV (2); CfC train_imdb.py's 20000")
    max_length: int = Field(
        200, ge=1, le=MAX_STEPS, description="the last max_length tokens of a review are kept (CfC maxlen 200, pad_sequences)")
    embedding_size: int = Field(
        64, ge=1, le=65_536, description="learned embedding in front of every family (CfC tunes embed_dim per model: 32-192)")
    val_fraction: float = Field(0.1, gt=0, lt=1, description="of the 25,000 training reviews")
    seed: Seed = Field(113, description="Keras load_data's shuffle seed (113, its default), and the validation carve")


class LocalParams(_Strict):
    """Your own data (pipeline/data/kinds/local/dataset.py): a long CSV, .npz splits in the processed-dataset
    contract, or aeon .ts files, as one file or a folder. What is left out is inferred from the
    labels where that is unambiguous; otherwise prepare names the key to set."""

    kind: Literal["local"] = Field(description=KIND)
    path: str = Field(..., min_length=1, max_length=4096,
                      description="a file or folder; relative paths are relative to the project root")
    task: Optional[Literal["classification", "binary", "regression"]] = Field(
        None, description="default: inferred from the labels (local/__init__.py, `infer_task`)")
    metric: Optional[Literal["accuracy", "auroc", "mse"]] = Field(
        None, description="default: accuracy (classification), auroc (binary), mse (regression)")
    classes: Optional[list[Union[str, int]]] = Field(
        None, min_length=2, max_length=100_000, description="class names in output order; binary: [negative, positive]")
    label: str = Field("label", min_length=1, description="the CSV label column")
    split: str = Field("split", min_length=1, description="the optional CSV column of train/val/test per series")
    val_fraction: float = Field(0.15, gt=0, lt=1, description="of all series (split by rule), or of train (fixed test)")
    test_fraction: float = Field(0.15, gt=0, lt=1, description="of all series, when no split is given")
    seed: Seed = 0
    per_step: Optional[bool] = Field(None, description="default: true when a label varies within a series")
    precompute: list[PrecomputeSpec] = Field(default_factory=list, max_length=MAX_PRECOMPUTE)

    @model_validator(mode="after")
    def _consistent(self) -> "LocalParams":
        if self.val_fraction + self.test_fraction >= 1:
            raise ValueError(f"val_fraction + test_fraction is {self.val_fraction + self.test_fraction:g}; "
                             f"allowed: below 1, leaving series to train on")
        if self.label in ("series", "time") or self.split in ("series", "time", self.label):
            raise ValueError(f"label {self.label!r} and split {self.split!r} must be two columns other than "
                             f"'series' and 'time'")
        if self.metric is not None and self.task is not None and self.metric not in _METRICS[self.task]:
            raise ValueError(f"metric {self.metric!r} does not fit task {self.task!r}; allowed: {_METRICS[self.task]}")
        if self.classes is not None:
            names = [str(c) for c in self.classes]
            if len(set(names)) != len(names):
                raise ValueError(f"classes lists {_few(sorted({n for n in names if names.count(n) > 1}))} twice")
            if self.task == "regression":
                raise ValueError("classes are for classification and binary tasks, not regression")
            if self.task == "binary" and len(names) != 2:
                raise ValueError(f"task binary needs 2 classes [negative, positive]; classes lists {len(names)}")
        return self


# Which metrics fit which task: AUROC scores one probability (binary), accuracy a predicted class.
_METRICS = {"classification": ["accuracy"], "binary": ["auroc", "accuracy"], "regression": ["mse"]}


DatasetParams = Annotated[
    Union[XorParams, UeaParams, SpeechCommandsParams, SepsisParams, Physionet2012Params,
          PersonActivityParams, Walker2dParams, ImdbParams, LocalParams],
    Field(discriminator="kind"),
]


_KINDS = {
    "xor": XorParams, "uea": UeaParams, "speech_commands": SpeechCommandsParams, "sepsis": SepsisParams,
    "physionet2012": Physionet2012Params, "person_activity": PersonActivityParams, "walker2d": Walker2dParams,
    "imdb": ImdbParams, "local": LocalParams,
}
