"""What one search trial of a family costs, for the saturating search's shared budget
(pipeline.sweep.saturation): a committed price per built-in family, never a time measured in the run.

The price is the family's reference configuration's seconds per epoch in the zoo benchmark
(benchmarks/zoo: every family on one synthetic batch set, one torch thread, one process each),
relative to the median family, in thousandths (whole numbers: the pool's sums stay exact).
`trial_costs.json` holds the table with the run it comes from; `make bench` writes it again
(benchmarks.zoo.run) and tests/test_saturation.py checks that it matches benchmarks/results/zoo.json.

Why a committed table and not the seconds each trial took: the pool's grants decide which trials
run, and grants that depended on measured seconds would give other searches on a loaded machine.
The table is a rough price: a trial's real cost also depends on the dataset (sequence length,
series) and on the configuration proposed; the zoo's ranking of families held on JapaneseVowels
and ItalyPowerDemand (docs/benchmarks/saturation.md). A family the table does not list (a user's
own module) costs the median, 1000.
"""

from __future__ import annotations

import json
import statistics
from functools import lru_cache
from pathlib import Path
from typing import Any, Mapping

TABLE = Path(__file__).with_name("trial_costs.json")
MEDIAN = 1000  # the price of a family at the zoo's median seconds per epoch


@lru_cache(maxsize=1)
def _table() -> dict[str, int]:
    return {str(k): int(v) for k, v in json.loads(TABLE.read_text())["costs"].items()}


def trial_cost(family: str) -> int:
    """The price of one trial of `family`, in thousandths of the median family's (1000 if unlisted)."""
    return _table().get(family, MEDIAN)


def costs_from_zoo(report: Mapping[str, Any]) -> dict[str, Any]:
    """The table `trial_costs.json` holds, from a zoo benchmark report (benchmarks/results/zoo.json):
    {source, date, commit, cpu, costs: {family: price}} over the families that ran (status ok)."""
    seconds = {f["family"]: float(f["seconds_per_epoch"]) for f in report["families"]
               if f.get("status") == "ok" and f.get("seconds_per_epoch")}
    median = statistics.median(seconds.values())
    machine = report["machine"]
    return {"source": "benchmarks/results/zoo.json", "date": machine["date"], "commit": machine["git_commit"],
            "cpu": machine["cpu"], "unit": "thousandths of the median family's seconds per epoch",
            "costs": {family: max(1, round(MEDIAN * s / median)) for family, s in seconds.items()}}
