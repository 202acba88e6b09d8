"""Python's cyclic garbage collector in the processes that train a search trial or a final seed.

Building a Trainer (reading the dataset, building the model's inputs and the model) creates and
drops enough tracked objects to set the collector off about 300 times, and its older generations
walk every object the process tracks: about 300,000 in a Ray Tune trial process (Ray, Tune, pandas,
torch and the models' modules; a search trial adds MLflow's). Measured with benchmarks/cluster/collector.py (2026-11-28, this
2-core machine, cfc on JapaneseVowels; docs/benchmarks/cluster.md): 0.34 s of collection per
trial's set-up, 0.07 s with `freeze_survivors` before it. During the epochs the collector hardly
runs (0 or 1 time an epoch), so the epochs themselves do not change.

`freeze_survivors` collects once, then moves every object alive into the collector's permanent
generation (gc.freeze), which later collections skip. A trial calls it before building its Trainer
(what the process imported and what earlier trials of a reused Tune process left alive) and again
once it is built (the dataset, model and optimiser, alive until the trial ends). Frozen objects are
still freed by reference counting as before; only a reference cycle among them would never be
collected, and the collection just before each freeze leaves none of the earlier work's garbage.
Nothing a result depends on changes: the collector frees memory, it computes nothing.

`young_objects_only` is for library calls that run a full collection of their own each time:
statsmodels 0.15's Holm adjustment (`multipletests(method="holm")`, also under scikit-posthocs'
`p_adjust="holm"`) ends with `gc.collect()`, which walks every object the process tracks: 0.2 s a
call in a process with torch, MLflow and matplotlib loaded, and a report makes one or more per
dataset (13 calls, 2.6 s of a 6 s report of three datasets, profiled on 2026-12-05).
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator


_survivors_frozen = False  # freeze_survivors ran in this process


def freeze_survivors() -> int:
    """Collect, then exempt every object now alive from later collections; returns how many
    objects the collector still tracks (those created from here on)."""
    global _survivors_frozen
    gc.collect()
    gc.freeze()
    _survivors_frozen = True
    return len(gc.get_objects())


@contextlib.contextmanager
def young_objects_only() -> Iterator[None]:
    """Inside: a full collection walks only the objects created inside, not the rest of the heap
    (frozen for the while, unfrozen after; both are constant-time list splices in CPython).

    After freeze_survivors (a trial or seed process) nothing is changed, so that its freeze stays
    in force. gc.get_freeze_count() walks the frozen objects one by one (CPython 3.11), so it is
    asked only then: asked on every call it cost more than the collection it saves. A freeze made
    elsewhere with gc.freeze() is undone at the end."""
    if _survivors_frozen and gc.get_freeze_count():
        yield
        return
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()
