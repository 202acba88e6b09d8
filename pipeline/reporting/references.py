"""Figures the source papers report, read from `references.yaml`, for the report to show beside ours.

    sources:
      <key>: {citation: "...", url: "...", tables: ["Table 1", "Sec. 4", ...] (optional),
              best_run: true (optional: each figure is a best run, not a mean over seeds)}
    figures:            # same dataset, same task, same model family: shown beside our numbers
      - {dataset, family, metric, mean, std (optional), unit, source: <key>,
         where: "Table 4, <column>", note: "how the paper's setting differs" (optional),
         config: {model argument: value} (optional: the row's variant, shown only beside a run of it),
         other_model: "which model it is" (optional: another model under the family's name, never compared)}
    other_tasks:        # same dataset, a different task: kept for the record, never compared
      - {the same keys, and task: "what the paper's task is"}
    published_best:     # the best published test accuracy of a UEA/UCR archive dataset, any model
      <archive name, e.g. GunPoint>: {value, unit: fraction | percent, model: "ROCKET", source: <key>,
         where: "Table 3" or "the file it was read in", split: official | resamples,
         selection: "how the model was selected", selected_on_test: false, note: "..." (optional)}

Values are kept as the paper prints them and converted only when compared:
`as_fraction()` = printed x UNIT_SCALE[unit] (accuracy / AUROC in [0, 1], MSE in data units).
A source that lists `tables` requires each of its figures' `where` to start with one of them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import (BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator,
                      model_validator)

from pipeline.config import read_yaml
from pipeline.errors import ConfigError

REFERENCES_FILE = "references.yaml"

# Printed value x scale = the value on the pipeline's scale. "percent" is a 0-100 column (accuracy
# %, or AUC x 10^2); "x1e-3" is a column headed "MSE (x 10^-3)", whose 2.28 means 0.00228.
UNIT_SCALE: dict[str, float] = {"percent": 0.01, "fraction": 1.0, "raw": 1.0, "x1e-2": 1e-2, "x1e-3": 1e-3}
UNITS_OF_METRIC: dict[str, tuple[str, ...]] = {
    "accuracy": ("percent", "fraction"),
    "auroc": ("percent", "fraction"),
    "mse": ("raw", "x1e-2", "x1e-3"),
}
BOUNDED_METRICS = ("accuracy", "auroc")  # in [0, 1] once converted; a value outside is a typo
WHERE_SEPARATORS = " ,;("  # "Table 1" names "Table 1(a), top" but not "Table 12"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Source(_Strict):
    citation: str
    url: str = ""
    tables: list[str] = []
    best_run: bool = False  # every figure is the best of several runs (no std): compared with our best seed

    def names_table(self, where: str) -> bool:
        """Whether `where` starts with one of this source's tables (always, when none are listed)."""
        return not self.tables or any(_starts_with_label(where, t) for t in self.tables)


def _starts_with_label(where: str, label: str) -> bool:
    return where == label or (where.startswith(label) and where[len(label)] in WHERE_SEPARATORS)


class Figure(_Strict):
    dataset: str
    family: str
    metric: Literal["accuracy", "auroc", "mse"]
    mean: float
    std: float | None = Field(None, ge=0)
    unit: Literal["percent", "fraction", "raw", "x1e-2", "x1e-3"]
    source: str
    where: str = Field(min_length=1)
    note: str = ""
    # the model arguments of the paper's row where it reports several variants of the family
    # (e.g. {method: euler}); shown beside ours only when our configuration has them
    config: dict[str, str | int | float | bool] = {}
    # where the paper's model carries the family's name but is another model: which, and why
    # (e.g. Lechner & Hasani's GRU-ODE vs Kidger et al.'s path-driven one); listed, never compared
    other_model: str = ""

    @field_validator("unit")
    @classmethod
    def _unit_fits_metric(cls, unit: str, info: ValidationInfo) -> str:
        metric = info.data.get("metric")  # absent when the metric itself was invalid
        if metric is not None and unit not in UNITS_OF_METRIC[metric]:
            raise ValueError(f"unit {unit!r} does not fit metric {metric!r} "
                             f"(allowed: {', '.join(UNITS_OF_METRIC[metric])})")
        return unit

    @model_validator(mode="after")
    def _in_range(self) -> "Figure":
        value = self.mean * UNIT_SCALE[self.unit]
        if self.metric in BOUNDED_METRICS and not 0.0 <= value <= 1.0:
            raise ValueError(f"mean {self.mean} in unit {self.unit!r} is {value:g} as a fraction; "
                             f"{self.metric} must lie in [0, 1] (0-100 for percent)")
        if self.metric == "mse" and value < 0.0:
            raise ValueError(f"mean {self.mean}: an MSE cannot be negative")
        return self

    def as_fraction(self) -> tuple[float, float | None]:
        """(mean, std) on the pipeline's scale: accuracy / AUROC in [0, 1], MSE in data units."""
        scale = UNIT_SCALE[self.unit]
        return self.mean * scale, None if self.std is None else self.std * scale


class OtherTaskFigure(Figure):
    """A paper's figure on one of our datasets for a task we do not run (e.g. per-hour sepsis)."""

    task: str = Field(min_length=1)


class PublishedBest(_Strict):
    """The best test accuracy published for a UEA/UCR archive dataset, whatever the model: the
    report sets it beside our best family where we run the archive's own split, unchanged."""

    value: float
    unit: Literal["fraction", "percent"]  # the archive's datasets are all scored by accuracy
    model: str = Field(min_length=1)
    source: str
    where: str = Field(min_length=1)  # a table of the source, or the results file it was read in
    split: Literal["official", "resamples"]  # the archive's train/test split, or a mean over resamples of it
    selection: str = Field(min_length=1)  # how the source chose the model it reports
    selected_on_test: bool  # the source chose it by test accuracy: an optimistic figure
    note: str = ""

    @model_validator(mode="after")
    def _in_range(self) -> "PublishedBest":
        if not 0.0 <= self.as_fraction() <= 1.0:
            raise ValueError(f"value {self.value} in unit {self.unit!r} is {self.as_fraction():g} as a fraction; "
                             "an accuracy must lie in [0, 1] (0-100 for percent)")
        return self

    def as_fraction(self) -> float:
        """The accuracy in [0, 1], the pipeline's scale."""
        return self.value * UNIT_SCALE[self.unit]


class References(_Strict):
    sources: dict[str, Source]
    figures: list[Figure]
    other_tasks: list[OtherTaskFigure] = []
    published_best: dict[str, PublishedBest] = {}  # UEA/UCR archive name -> its best published result

    @field_validator("published_best", mode="before")
    @classmethod
    def _none_is_empty(cls, value: Any) -> Any:
        return {} if value is None else value  # `published_best:` with every entry commented out

    @model_validator(mode="after")
    def _sources_and_tables(self) -> "References":
        for key, figures in (("figures", self.figures), ("other_tasks", self.other_tasks)):
            for i, f in enumerate(figures):
                _check_source(f, f"{key}.{i}", self.sources)
        for name, best in self.published_best.items():
            # no check of `where` against the source's tables: a published best is often read in a
            # results file of the source's repository rather than in one of its tables
            if best.source not in self.sources:
                raise ValueError(f"published_best.{name}.source {best.source!r} is not a key of `sources` "
                                 f"(defined: {sorted(self.sources)})")
        return self

    def for_pair(self, dataset: str, family: str) -> list[Figure]:
        """The figures comparable with ours; `other_tasks` never are."""
        return [f for f in self.figures if f.dataset == dataset and f.family == family]


def _check_source(f: Figure, key: str, sources: dict[str, Source]) -> None:
    if f.source not in sources:
        raise ValueError(f"{key}.source {f.source!r} is not a key of `sources` (defined: {sorted(sources)})")
    src = sources[f.source]
    if not src.names_table(f.where):
        raise ValueError(f"{key}.where {f.where!r} names no table of source {f.source!r} "
                         f"(must start with one of {src.tables})")


def _describe(error: Any) -> str:
    """One error as `key `a.b` = value: message`; whole mappings are not echoed, only scalars."""
    key = ".".join(str(p) for p in error["loc"])
    msg = error["msg"].removeprefix("Value error, ")
    value = error.get("input")
    shown = f" = {value!r}" if isinstance(value, (str, int, float, bool)) and error["type"] != "missing" else ""
    return f"key `{key}`{shown}: {msg}" if key else msg


def load_references(root: Path) -> References:
    """Read and check `<root>/references.yaml`; no file means no reference figures."""
    path = root / REFERENCES_FILE
    if not path.exists():
        return References(sources={}, figures=[])
    try:
        return References.model_validate(read_yaml(path) or {"sources": {}, "figures": []})
    except ValidationError as exc:
        raise ConfigError(f"{path}: " + "; ".join(_describe(e) for e in exc.errors())) from None
