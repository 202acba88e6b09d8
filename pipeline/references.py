"""Figures the source papers report, read from `references.yaml`, for the report to show beside ours.

    sources:
      <key>: {citation: "...", url: "..."}
    figures:
      - {dataset, family, metric, mean, std (optional), unit: percent | fraction | raw,
         source: <key>, where: "Table 4", note: "how the paper's setting differs" (optional)}

Values are kept as the paper prints them (unit) and converted to the fraction the pipeline's
metrics use only when compared.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from pipeline.config import read_yaml
from pipeline.errors import ConfigError

REFERENCES_FILE = "references.yaml"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Source(_Strict):
    citation: str
    url: str = ""


class Figure(_Strict):
    dataset: str
    family: str
    metric: Literal["accuracy", "auroc", "mse"]
    mean: float
    std: float | None = Field(None, ge=0)
    unit: Literal["percent", "fraction", "raw"]
    source: str
    where: str
    note: str = ""

    def as_fraction(self) -> tuple[float, float | None]:
        """(mean, std) on the pipeline's scale: accuracy / AUROC in [0, 1], MSE raw."""
        scale = 0.01 if self.unit == "percent" else 1.0
        return self.mean * scale, None if self.std is None else self.std * scale


class References(_Strict):
    sources: dict[str, Source]
    figures: list[Figure]

    @model_validator(mode="after")
    def _known_sources(self) -> "References":
        for i, f in enumerate(self.figures):
            if f.source not in self.sources:
                raise ValueError(f"figures.{i}.source {f.source!r} is not a key of `sources` "
                                 f"(defined: {sorted(self.sources)})")
        return self

    def for_pair(self, dataset: str, family: str) -> list[Figure]:
        return [f for f in self.figures if f.dataset == dataset and f.family == family]


def load_references(root: Path) -> References:
    """Read and check `<root>/references.yaml`; no file means no reference figures."""
    path = root / REFERENCES_FILE
    if not path.exists():
        return References(sources={}, figures=[])
    try:
        return References.model_validate(read_yaml(path) or {"sources": {}, "figures": []})
    except ValidationError as exc:
        where = "; ".join(f"key `{'.'.join(str(p) for p in e['loc']) or '<root>'}`: {e['msg']}"
                          for e in exc.errors())
        raise ConfigError(f"{path}: {where}") from None
