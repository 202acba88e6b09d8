"""Bounds on params.yaml values that are well typed but cannot do what they are for (issue 31).

Each was once accepted without a word and cost a search or a final stage later:

    split sizes        a generated dataset (`kind: xor`) must leave at least MIN_SERIES series in
                       each of train, validation and test: a score over n series moves by 1/n
                       with a single series, so below 10 one series is worth more than 10 points
                       of accuracy (or of AUROC's pairs), more than the differences between
                       families this project measures; the search picks its best configuration
                       and the final stage its kept epoch by such a score. 11 sequences at
                       val_fraction 0.1 were 9 to train on and 2 to validate on.
    trial time limit   `search.trial_time_limit_s` (and each `family_time_limit_s`) at least
                       MIN_TRIAL_TIME_LIMIT_S: the limit is a guard against a hung trial, checked
                       between batches, and a fresh trial process's first batch alone (its
                       kernels' first run) takes that long; 0.001 s failed every trial a minute
                       after the search started. `ctsweep search` also measures one epoch of each
                       family's reference configuration before Ray starts and refuses a limit below
                       it (pipeline/sweep/epoch_time.py).
    lr factors         `final.lr_factors` within LR_FACTORS: the robustness rerun asks whether a
                       ranking survives a small change of the learning rate (the fast-weight
                       paper's 5e-5 against 6e-5); beyond a decade either way it is another
                       configuration, not a small change (the spaces search lr over about three
                       decades), and 1e-300 turned the rate into 0.

`patience` is bounded where the epochs it counts are known: `final.patience` by the final epochs
(params.py), a space's `patience` by MAX_EPOCHS at load and by the final epochs in the final
stage (pipeline/config/protocol.py dataset_problem); a search whose trials are shorter than it
says so in one line (pipeline/spaces/checks.py patience_note).
"""

from __future__ import annotations

import math
from typing import Any

MIN_SERIES = 10  # per split of a generated dataset: see above
MIN_TRIAL_TIME_LIMIT_S = 1.0
LR_FACTORS = (0.1, 10.0)  # the allowed range of a robustness factor, both ends included


def carved(n: int, val_fraction: float) -> tuple[int, int]:
    """(train, validation) series when `val_fraction` of n is carved off for validation, as
    sklearn's train_test_split counts it (the ceiling: pipeline/data/contract.py carve_validation)."""
    val = math.ceil(val_fraction * n)
    return n - val, val


def _enough(n: int, val_fraction: float) -> bool:
    return min(carved(n, val_fraction)) >= MIN_SERIES


def smallest_n(val_fraction: float, most: int) -> int | None:
    """The fewest sequences that leave MIN_SERIES in train and in validation (None above `most`)."""
    n = max(2 * MIN_SERIES, int((MIN_SERIES - 1) / val_fraction), int(MIN_SERIES / (1 - val_fraction)) - 2)
    while n <= most:
        if _enough(n, val_fraction):
            return n
        n += 1
    return None


def split_problem(dataset: str, n_train: int, val_fraction: float, n_test: int, most: int) -> str | None:
    """What is wrong with a generated dataset's split sizes (one line naming the key), or None."""
    train, val = carved(n_train, val_fraction)
    why = (f"a score over fewer than {MIN_SERIES} series moves by more than {100 // MIN_SERIES} points with one "
           f"series, too coarse to choose a configuration or an epoch by, or to report")
    if min(train, val) < MIN_SERIES:
        least = smallest_n(val_fraction, most)
        allowed = f"n_train >= {least} at val_fraction {val_fraction:g}" if least else "a larger val_fraction"
        return (f"key `prepare.{dataset}.n_train`: {n_train} with val_fraction {val_fraction:g} leaves {train} "
                f"training and {val} validation series; allowed: at least {MIN_SERIES} of each ({allowed}): {why}")
    if n_test < MIN_SERIES:
        return (f"key `prepare.{dataset}.n_test`: {n_test} test series; allowed: at least {MIN_SERIES}: {why}")
    return None


def time_limit_problem(seconds: float | None, unset: str = "null for no limit") -> str | None:
    """What is wrong with a trial time limit (one line), or None."""
    if seconds is None or seconds >= MIN_TRIAL_TIME_LIMIT_S:
        return None
    return (f"{seconds:g} s cannot hold a trial's first epoch; allowed: at least {MIN_TRIAL_TIME_LIMIT_S:g} s, or "
            f"{unset} (a guard against a hung trial, checked between batches: under a second it can only cut "
            f"trials short by the machine's load, never catch a hang)")


def lr_factor_problem(factors: list[float]) -> str | None:
    """What is wrong with `final.lr_factors` beyond their being distinct and positive, or None."""
    low, high = LR_FACTORS
    outside = [f for f in factors if not low <= f <= high]
    if not outside:
        return None
    shown = ", ".join(f"{f:g}" for f in outside[:5]) + (", ..." if len(outside) > 5 else "")
    return (f"lr_factors [{shown}] lie outside [{low:g}, {high:g}]; allowed: factors from {low:g} to {high:g} other "
            f"than 1 (a robustness rerun changes the learning rate a little; beyond a decade either way it is "
            f"another configuration, which the search covers)")


def time_limits_problem(limits: dict[str, Any]) -> str | None:
    """The first problem of a {family: seconds} mapping (`search.family_time_limit_s`), or None."""
    for family, seconds in limits.items():
        problem = time_limit_problem(seconds, f"leave {family} out (search.trial_time_limit_s then applies)")
        if problem:
            return f"{family}: {problem}"
    return None


def checked(problem: Any) -> Any:
    """A pydantic validator raising the one line `problem(value)` returns, if any."""
    def check(value: Any) -> Any:
        if (why := problem(value)) is not None:
            raise ValueError(why)
        return value
    return check
