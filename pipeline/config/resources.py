"""What one search trial or one final seed asks Ray for (`search.resources`, `final.resources`) and
the per-family changes to it (`family_resources`)."""

from __future__ import annotations

from pydantic import Field, field_validator

from pipeline.config.base import _Strict

MAX_CPU, MAX_GPU, MAX_WORKERS = 1024, 64, 1024  # per trial or seed: beyond any one Ray cluster here


def _whole_gpus_above_one(gpu: float | None) -> float | None:
    if gpu is not None and gpu > 1 and gpu != int(gpu):  # Ray refuses fractions above one GPU
        raise ValueError(f"gpu must be at most 1 or a whole number, got {gpu}")
    return gpu


class Resources(_Strict):
    """What one trial (search) or one seed (final) asks Ray for."""

    cpu: float = Field(1, gt=0, le=MAX_CPU, description=f"CPUs per process, at most {MAX_CPU} (torch threads: their integer part)")
    gpu: float = Field(0, ge=0, le=MAX_GPU, description=f"GPUs per process, at most {MAX_GPU}; fractional values "
                                                       "(at most 1) pack several trials on one GPU")
    workers: int = Field(1, ge=1, le=MAX_WORKERS, description=f"above 1 (at most {MAX_WORKERS}): data-parallel training "
                         "over this many Ray Train workers, each with `cpu` and `gpu` (search trials only)")

    _whole_gpus = field_validator("gpu")(_whole_gpus_above_one)


class ResourceOverride(_Strict):
    """Per-family changes to the stage's `resources`, e.g. {cdr_nde_heat: {cpu: 2}}: only the keys
    given replace the defaults (each with the same bounds and rules as in `resources`)."""

    cpu: float | None = Field(None, gt=0, le=MAX_CPU,
                              description="the family's CPUs per process (null: `resources.cpu`)")
    gpu: float | None = Field(None, ge=0, le=MAX_GPU,
                              description="the family's GPUs per process (null: `resources.gpu`)")
    workers: int | None = Field(None, ge=1, le=MAX_WORKERS, description="the family's data-parallel workers per trial "
                                "(null: `resources.workers`; final: 1 only)")

    _whole_gpus = field_validator("gpu")(_whole_gpus_above_one)


def resolved_resources(base: Resources, overrides: dict[str, ResourceOverride], family: str) -> Resources:
    """`base` with the family's override (only the keys it gives), validated as `resources` is."""
    change = overrides[family].model_dump(exclude_none=True) if family in overrides else {}
    return Resources.model_validate({**base.model_dump(), **change})


