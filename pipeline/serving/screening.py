"""Screening series before a model predicts them: refuse what it cannot have been trained on,
warn about values far outside its training range (used by pipeline/serving/predict.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from pipeline.data.contract import Meta
from pipeline.errors import DataError

if TYPE_CHECKING:
    from pipeline.serving.series import Series

# "Far outside the training range": more than FAR_SIGMAS training standard deviations from the
# training mean, per channel (meta.norm_mean / norm_std, the statistics the model's inputs were
# standardised with). Whatever the distribution, at most 1 / FAR_SIGMAS**2 = 1% of the training
# values lie that far out (Chebyshev), and for a roughly normal channel none do (p ~ 1e-23), so a
# value there is an extrapolation; unit mistakes (g for mg, x1000) and sentinels (1e30, -999)
# land far beyond it. Heavy-tailed channels can hold real values out there, so it is a warning.
FAR_SIGMAS = 10.0
SHOWN_IDS = 5  # series ids named in a message; the rest are counted


def screen(path: Path, s: Series, meta: Meta) -> str | None:
    """Refuse series the model cannot have been trained on; flag values far outside its training range.

    Raises DataError naming the file and, per kind of problem, the series (the first SHOWN_IDS
    and a count): series without a single observed value, infinite values, and for token
    datasets ids that are not whole numbers below meta.vocab_size. Returns the warning line for
    observed values more than FAR_SIGMAS training standard deviations out, or None.
    """
    problems = [p for p in (_no_values(s), _infinite(s, meta), _bad_tokens(s, meta)) if p]
    if problems:
        raise DataError(f"{path}: refused, nothing was predicted: {'; '.join(problems)}")
    return _far_outside(path, s, meta)


def _series_list(s: Series, bad: np.ndarray) -> str:
    """`bad` (N,) bool -> "2 of 40 series ('a', 'b')", naming at most SHOWN_IDS of them."""
    names = [s.ids[i] for i in np.flatnonzero(bad)]
    shown = ", ".join(repr(n) for n in names[:SHOWN_IDS])
    more = f" and {len(names) - SHOWN_IDS} more" if len(names) > SHOWN_IDS else ""
    return f"{len(names)} of {len(s.ids)} series ({shown}{more})"


def _observed(s: Series) -> np.ndarray:
    """(N, L, C) bool: a value given at an observed step (padding after the mask is ignored)."""
    return s.mask[:, :, None] & ~np.isnan(s.x)


def _no_values(s: Series) -> str | None:
    bad = ~_observed(s).any(axis=(1, 2))
    return f"no value at all (every channel missing at every step) in {_series_list(s, bad)}" if bad.any() else None


def _standardised(s: Series, meta: Meta) -> np.ndarray:
    """(N, L, C) float64 values as the model sees them, NaN where not observed (float64: a large
    value must not overflow, and warn, on the way)."""
    z = (s.x.astype(np.float64) - np.asarray(meta.norm_mean)) / np.asarray(meta.norm_std)
    return np.where(_observed(s), z, np.nan)


def _infinite(s: Series, meta: Meta) -> str | None:
    """Infinite values, also those beyond float32 once standardised: the model computes in float32."""
    z = _standardised(s, meta) if len(meta.norm_std) == s.x.shape[2] else s.x.astype(np.float64)
    bad = (np.abs(np.where(s.mask[:, :, None], z, 0.0)) > np.finfo(np.float32).max).any(axis=(1, 2))
    return (f"infinite values (inf, or beyond float32's range of ±3.4e38 once standardised) in "
            f"{_series_list(s, bad)}; leave a missing value empty or NaN") if bad.any() else None


def _bad_tokens(s: Series, meta: Meta) -> str | None:
    if not meta.vocab_size:
        return None
    x = np.where(_observed(s), s.x, 0.0)
    bad = ((x != np.round(x)) | (x < 0) | (x >= meta.vocab_size)).any(axis=(1, 2))
    return (f"token ids that are not whole numbers in 0 .. {meta.vocab_size - 1} in {_series_list(s, bad)}"
            if bad.any() else None)


def _far_outside(path: Path, s: Series, meta: Meta) -> str | None:
    """The warning for standardised values beyond FAR_SIGMAS, naming the worst series, or None."""
    if meta.vocab_size or len(meta.norm_std) != s.x.shape[2]:
        return None  # token ids are not standardised
    z = np.nan_to_num(np.abs(_standardised(s, meta)), nan=0.0)  # (N, L, C)
    far = z > FAR_SIGMAS
    if not far.any():
        return None
    i, j, c = np.unravel_index(int(np.argmax(z)), z.shape)
    return (f"{path}: {int(far.sum())} value(s) in {_series_list(s, far.any(axis=(1, 2)))} lie more than "
            f"{FAR_SIGMAS:g} training standard deviations from the training mean, outside anything the model "
            f"was trained on; their predictions are extrapolations (worst: series {s.ids[i]!r}, channel "
            f"{meta.channels[c]!r} = {float(s.x[i, j, c]):.4g}, {float(z[i, j, c]):.3g} standard deviations)")


def _check_output(path: Path, s: Series, meta: Meta, output: np.ndarray) -> None:
    """Refuse (DataError) when the model's output is not finite for some series."""
    n, length = s.mask.shape
    if meta.per_step:
        finite = np.where(s.mask, np.isfinite(output.reshape(n, length, -1)).all(axis=-1), True).all(axis=1)
    else:
        finite = np.isfinite(output.reshape(n, -1)).all(axis=1)
    if not finite.all():
        raise DataError(f"{path}: refused, nothing was predicted: the model's output is not finite for "
                        f"{_series_list(s, ~finite)}; their values are probably extreme")
