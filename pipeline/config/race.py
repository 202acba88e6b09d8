"""params.yaml `final.race`: seeds added a round at a time until the comparison is decided.

pipeline/final/race.py runs it; pipeline/reporting/verdict.py reads its margin and alpha back from
the records. Checked with the rest of `final` before Ray starts (FinalParams' validator).
"""

from __future__ import annotations

from pydantic import Field

from pipeline.config.base import _Strict

MAX_RACE_SEEDS = 100  # as final.seeds


class RaceParams(_Strict):
    enabled: bool = Field(False, description="after the configured seeds, add seeds a round at a time to the best "
                          "family and to every family neither separated from it (Welch) nor shown equivalent to it "
                          "(TOST), until each is one or the other or `max_seeds` is reached")
    margin: float = Field(0.01, gt=0, le=1e6, description="the equivalence margin, in the metric's units "
                          "(accuracy and AUROC as fractions: 0.01 is one point); the verdict line uses it "
                          "whether or not the race runs")
    max_seeds: int = Field(10, ge=2, le=MAX_RACE_SEEDS, description="seeds a family may reach at most, the "
                           "configured ones included (at least as many as `final.seeds`, at most 100)")
    seeds_per_round: int = Field(1, ge=1, le=MAX_RACE_SEEDS, description="seeds each open family gains per round")
    alpha: float = Field(0.05, gt=0, le=0.5, description="the family-wise error of the whole race: split evenly "
                         "over its looks at the data (the first and each round's), Holm across the pairs at each")

    def looks(self, base: int) -> int:
        """Looks at the data a race from `base` seeds can take: the first, then one per round."""
        return 1 + (-(-max(0, self.max_seeds - base) // self.seeds_per_round) if self.enabled else 0)

    def alpha_per_look(self, base: int) -> float:
        """The share of alpha each look spends (Bonferroni over the looks: valid whatever their dependence)."""
        return self.alpha / self.looks(base)
