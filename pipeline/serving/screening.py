"""Screening series before a model predicts them: refuse what it cannot have been trained on and
values beyond every training value, warn about values far outside its training range, and refuse
input that looks standardised. `ctsweep predict` and the pyfunc model (`model.predict` in Python,
`mlflow models serve`) call the same `screen`, so they refuse and warn alike.

The ranges are in training standard deviations from the training mean, per channel (meta.norm_mean
and norm_std, the statistics the model's inputs were standardised with):

    |value - mean| > REFUSE_SIGMAS (1000) std   refused, per series: beyond every training value
    |value - mean| > FAR_SIGMAS (10) std        predicted, with one warning line: an extrapolation

No training value can lie more than sqrt(n - 1) standard deviations from the mean of the n values
it was one of (Samuelson's inequality), so beyond 1000 lies outside every training value of any
channel with fewer than a million observed training values (and, whatever n, at most one value in
a million lies there, by Chebyshev's inequality). A value there is a unit mistake (g for kg,
x1000), a sentinel (1e30) or a corrupt file, never data the model has seen: its prediction would
be noise. Token datasets are checked against their vocabulary instead.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from pipeline.data.contract import Meta
from pipeline.errors import DataError
from pipeline.names import shown

if TYPE_CHECKING:
    from pipeline.serving.series import Series

# Whatever the distribution, at most 1 / FAR_SIGMAS**2 = 1% of the training values lie that far
# out (Chebyshev), and for a roughly normal channel none do (p ~ 1e-23). Heavy-tailed channels
# can hold real values out there, so it is a warning.
FAR_SIGMAS = 10.0
REFUSE_SIGMAS = 1000.0  # see the module docstring
SHOWN_IDS = 5  # series ids named in a message; the rest are counted

# Standardised input (the data/processed splits, standardised for training) in place of original
# units: per channel, the input's mean m and standard deviation s are compared with those of
# standardised data (0, 1) and with the training statistics (mu, sigma), as the distance
# d = |m - mu| / sigma + |ln(s / sigma)|. Only channels with STANDARDISED_MIN_VALUES observed
# values count (the estimate of m is then within ~0.1 sigma), and only where standardised data and
# the training data differ by d >= 1 (elsewhere mistaking one for the other changes little).
# Averaged over those channels, d from (0, 1) at most STANDARDISED_CLOSE and d from the training
# statistics at least STANDARDISED_FAR: the file looks standardised and is refused.
STANDARDISED_MIN_VALUES = 100
STANDARDISED_CLOSE = 0.4
STANDARDISED_FAR = 1.5


def screen(source: str | Path, s: Series, meta: Meta) -> str | None:
    """Refuse series the model cannot have been trained on; flag values far outside its training range.

    Raises DataError, one line starting with `source` (a file, or "model input") and, per kind of
    problem, naming the series (the first SHOWN_IDS and a count): series without a single observed
    value, infinite values, for token datasets ids that are not whole numbers below meta.vocab_size,
    and values beyond REFUSE_SIGMAS; then, for the whole input, values that look standardised.
    Returns the warning line for observed values beyond FAR_SIGMAS, or None.
    """
    problems = [p for p in (_no_values(s), _infinite(s, meta), _bad_tokens(s, meta), _beyond(s, meta)) if p]
    if problems:
        raise DataError(f"{source}: refused, nothing was predicted: {'; '.join(problems)}")
    standardised = _looks_standardised(s, meta)
    if standardised:
        raise DataError(f"{source}: refused, nothing was predicted: {standardised}")
    return _far_outside(source, s, meta)


def _series_list(s: Series, bad: np.ndarray) -> str:
    """`bad` (N,) bool -> "2 of 40 series ('a', 'b')", naming at most SHOWN_IDS of them, each cut short."""
    names = [s.ids[i] for i in np.flatnonzero(bad)]
    listed = ", ".join(shown(n) for n in names[:SHOWN_IDS])
    more = f" and {len(names) - SHOWN_IDS} more" if len(names) > SHOWN_IDS else ""
    return f"{len(names)} of {len(s.ids)} series ({listed}{more})"


def _observed(s: Series) -> np.ndarray:
    """(N, L, C) bool: a value given at an observed step (padding after the mask is ignored)."""
    return s.mask[:, :, None] & ~np.isnan(s.x)


def _scaled(meta: Meta, s: Series) -> bool:
    """Whether the channels are standardised for the model (not token ids) and the statistics fit."""
    return not meta.vocab_size and len(meta.norm_std) == s.x.shape[2]


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


def _z(s: Series, meta: Meta) -> np.ndarray:
    """(N, L, C) |standardised value|, 0 where not observed or infinite (refused on their own)."""
    return np.nan_to_num(np.abs(_standardised(s, meta)), nan=0.0, posinf=0.0)


def _worst(s: Series, meta: Meta, z: np.ndarray) -> str:
    i, j, c = np.unravel_index(int(np.argmax(z)), z.shape)
    return (f"series {shown(s.ids[i])}, channel {shown(meta.channels[c])} = {float(s.x[i, j, c]):.4g}, "
            f"{float(z[i, j, c]):.3g} standard deviations")


def _beyond(s: Series, meta: Meta) -> str | None:
    """Values beyond REFUSE_SIGMAS: outside every training value (see the module docstring)."""
    if not _scaled(meta, s):
        return None
    z = _z(s, meta)
    bad = z > REFUSE_SIGMAS
    if not bad.any():
        return None
    return (f"values more than {REFUSE_SIGMAS:g} training standard deviations from the training mean, beyond "
            f"every training value (a unit mistake, a sentinel such as 1e30?), in "
            f"{_series_list(s, bad.any(axis=(1, 2)))} (worst: {_worst(s, meta, z)}); give series in the original "
            f"units of the training data")


def _far_outside(source: str | Path, s: Series, meta: Meta) -> str | None:
    """The warning for standardised values beyond FAR_SIGMAS, naming the worst series, or None."""
    if not _scaled(meta, s):
        return None
    z = _z(s, meta)
    far = z > FAR_SIGMAS
    if not far.any():
        return None
    return (f"{source}: {int(far.sum())} value(s) in {_series_list(s, far.any(axis=(1, 2)))} lie more than "
            f"{FAR_SIGMAS:g} training standard deviations from the training mean, outside anything the model "
            f"was trained on; their predictions are extrapolations (worst: {_worst(s, meta, z)})")


def _distance(mean: np.ndarray, std: np.ndarray, mu: np.ndarray, sigma: np.ndarray) -> np.ndarray:
    """|mean - mu| / sigma + |ln(std / sigma)|, per channel."""
    return np.abs(mean - mu) / sigma + np.abs(np.log(std / sigma))


def _looks_standardised(s: Series, meta: Meta) -> str | None:
    """The reason when the input's per-channel statistics are those of standardised data, not of
    the training data in original units (see STANDARDISED_*), else None."""
    if not _scaled(meta, s):
        return None
    observed = _observed(s)
    count = observed.sum(axis=(0, 1))  # (C,)
    values = np.where(observed, s.x.astype(np.float64), np.nan)
    mu, sigma = np.asarray(meta.norm_mean, np.float64), np.asarray(meta.norm_std, np.float64)
    with np.errstate(all="ignore"):  # channels without values: NaN, not counted below
        mean, std = np.nanmean(values, axis=(0, 1)), np.nanstd(values, axis=(0, 1))
        apart = _distance(np.zeros_like(mu), np.ones_like(sigma), mu, sigma)  # standardised vs training
        used = (count >= STANDARDISED_MIN_VALUES) & (std > 0) & np.isfinite(mean) & (apart >= 1.0) & (sigma > 0)
        if not used.any():
            return None
        to_standard = _distance(mean, std, np.zeros_like(mu), np.ones_like(sigma))[used].mean()
        to_training = _distance(mean, std, mu, sigma)[used].mean()
    if not (to_standard <= STANDARDISED_CLOSE and to_training >= STANDARDISED_FAR):
        return None
    stats = ", ".join(f"{shown(meta.channels[c])} {mu[c]:.3g} ± {sigma[c]:.3g}" for c in np.flatnonzero(used)[:3])
    return (f"the values look standardised (mean ~0 and standard deviation ~1 in each of {int(used.sum())} "
            f"channel(s), as in the data/processed splits), not in the original units the model takes (training "
            f"mean ± std: {stats}{', ...' if used.sum() > 3 else ''}); convert them back with x * norm_std + "
            f"norm_mean (data/processed/{meta.name}/meta.json)")


def check_output(source: str | Path, s: Series, meta: Meta, output: np.ndarray) -> None:
    """Refuse (DataError) when the model's output is not finite for some series."""
    n, length = s.mask.shape
    if meta.per_step:
        finite = np.where(s.mask, np.isfinite(output.reshape(n, length, -1)).all(axis=-1), True).all(axis=1)
    else:
        finite = np.isfinite(output.reshape(n, -1)).all(axis=1)
    if not finite.all():
        raise DataError(f"{source}: refused, nothing was predicted: the model's output is not finite for "
                        f"{_series_list(s, ~finite)}; their values are probably extreme")


_check_output = check_output  # the name tests and older callers use
