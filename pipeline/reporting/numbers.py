"""How the report prints a score: accuracy in % with 2 decimals, every other metric as it is with 4."""

from __future__ import annotations


def _scale(metric: str) -> tuple[float, int]:
    return (100.0, 2) if metric == "accuracy" else (1.0, 4)


def fmt(mean: float, std: float | None, metric: str) -> str:
    """"mean ± std" (or "mean" without a std) on the report's scale for `metric`."""
    k, digits = _scale(metric)
    return f"{k * mean:.{digits}f}" + ("" if std is None else f" ± {k * std:.{digits}f}")


def signed(diff: float, metric: str) -> str:
    """A difference of two scores, with its sign."""
    k, digits = _scale(metric)
    return f"{k * diff:+.{digits}f}"
