"""UEA archive datasets from the copies the aeon package ships (no download).

JapaneseVowels: 270 train / 370 test series of 12 LPC channels, lengths 7-29, 9 speakers.
The irregular variant drops a fraction of each series' observations, all channels at once and
the same count per series, at random positions, keeping the original times (as Kidger et al.
2020 do with CharacterTrajectories at 30/50/70%).
"""

from __future__ import annotations

import numpy as np

from pipeline.data.contract import Split, pad_sequences
from pipeline.errors import ConfigError

# name -> aeon loader; aeon ships these files inside the package.
_LOADERS = {"JapaneseVowels": "load_japanese_vowels"}


def load_uea(name: str, split: str) -> tuple[list[np.ndarray], np.ndarray]:
    """Series as (L_i, C) arrays and their string labels, straight from aeon."""
    if name not in _LOADERS:
        raise ConfigError(f"UEA dataset {name!r} is not shipped with aeon here; valid: {sorted(_LOADERS)}")
    import aeon.datasets

    series, labels = getattr(aeon.datasets, _LOADERS[name])(split=split)
    return [np.asarray(s, np.float32).T for s in series], np.asarray(labels).astype(str)


def drop_observations(
    series: list[np.ndarray], fraction: float, rng: np.random.Generator
) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Remove int(L * fraction) time points from each (L, C) series; return values and times.

    Times are the original indices, so what remains is irregularly sampled. At least one
    observation is always kept.
    """
    values, times = [], []
    for s in series:
        length = len(s)
        n_drop = min(int(length * fraction), length - 1)
        keep = np.sort(rng.permutation(length)[n_drop:])
        values.append(s[keep])
        times.append(keep.astype(np.float32))
    return values, times


def uea_split(
    series: list[np.ndarray], labels: np.ndarray, classes: list[str], fraction: float, rng: np.random.Generator
) -> Split:
    """Series and string labels -> padded Split with integer labels indexing `classes`."""
    unknown = sorted(set(labels) - set(classes))
    if unknown:
        raise ValueError(f"labels {unknown} are not among the training classes {classes}")
    values, times = drop_observations(series, fraction, rng)
    x, t, mask = pad_sequences(values, times)
    y = np.searchsorted(np.asarray(classes), labels).astype(np.int64)
    return Split(x=x, t=t, mask=mask, y=y)
