"""params.yaml `search.saturation`: a family's search goes on in rounds while its expected best
validation score still rises, within one budget of priced trials for each dataset's searches.

pipeline/sweep/saturation.py decides; checked with the rest of `search` before Ray starts
(SearchParams' validator: the trial counts against `num_samples` and `round_size`).
"""

from __future__ import annotations

from pydantic import Field

from pipeline.config.base import _Strict

MAX_SATURATION_TRIALS = 100_000  # as search.num_samples


class SaturationParams(_Strict):
    enabled: bool = Field(False, description="true: `num_samples` is each family's share of one budget per "
                          "dataset (and repeat): num_samples trials of each family, each priced at its family's cost "
                          "(pipeline/sweep/trial_costs.json); a family stops when its curve flattens and its unused "
                          "share goes to families still rising, at their price, up to `max_trials` each")
    min_trials: int = Field(4, ge=1, le=MAX_SATURATION_TRIALS, description="trials every family runs before its "
                            "curve is read (a multiple of `round_size`, at most `num_samples`)")
    max_trials: int = Field(16, ge=1, le=MAX_SATURATION_TRIALS, description="trials a family may reach at most (a "
                            "multiple of `round_size`, at least `num_samples`)")
    rise: float = Field(0.01, gt=0, le=1, description="the curve still rises while the expected best of all the "
                        "family's trials beats the expected best of half of them by more than this share of its "
                        "value (Dodge et al. 2019; the report's ↑ mark reads the same curve)")


def saturation_problem(s: SaturationParams, num_samples: int, round_size: int) -> str | None:
    """Why `search.saturation` cannot work with these counts, in one clause; None when it can."""
    if not s.enabled:
        return None
    for key in ("min_trials", "max_trials"):
        value = getattr(s, key)
        if value % round_size:
            return (f"saturation.{key} is {value}, not a whole number of rounds of {round_size} (search.round_size); "
                    f"allowed: a multiple of {round_size}")
    if s.min_trials > num_samples:
        return (f"saturation.min_trials is {s.min_trials}, more than num_samples ({num_samples}), each family's share "
                f"of the budget: the budget cannot hold the first rounds of every family; allowed: {round_size} to "
                f"{num_samples // round_size * round_size}")
    if s.max_trials < num_samples:
        return (f"saturation.max_trials is {s.max_trials}, below num_samples ({num_samples}); allowed: at least "
                f"{num_samples}")
    return None
