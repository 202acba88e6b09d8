"""Training length in optimiser steps: an epoch budget with a floor of steps (issue 29).

A budget of `epochs` passes over the training split is counted in epochs everywhere (ASHA's
rungs, `patience`, the curves), but on a small split an epoch is a handful of optimiser steps: 32
training series at batch 32 make one step, so 100 epochs were 100 steps and a patience of 15
epochs stopped a model after 20-48 steps. With a floor of `min_steps`, an epoch is made of as
many whole passes over the training split (each in its own seeded order) as make

    epochs x passes_per_epoch x batches_per_pass >= min_steps

so the run trains at least `min_steps` steps at its full budget, and patience, counted in these
longer epochs, waits proportionally more steps. A split large enough for the floor keeps one
pass per epoch: nothing changes there. Whole passes, never a part of one, so every series is
seen equally often.

A batch never exceeds the training split: `effective_batch` is what training uses (search spaces
are clipped the same way before a search starts, pipeline/spaces/space.py `clip_batch`).
"""

from __future__ import annotations

import math

# Optimiser steps a final seed takes at least before early stopping may end it: a seed stopped
# sooner has not trained, whatever its validation curve says (the not-converged rule's "short",
# pipeline/reporting/marks.py, judges final seeds by the same number). Patience counted in epochs of
# a handful of steps (a small split: 10 epochs of 5 steps) would otherwise stop a seed after 60 steps.
MIN_STEPS = 100


def effective_batch(batch_size: int, n_train: int) -> int:
    """The batch a run trains with: `batch_size`, or the whole training split when it is smaller."""
    return max(1, min(batch_size, n_train))


def batches_per_pass(n_train: int, batch_size: int) -> int:
    """Optimiser steps in one pass over `n_train` series (the last batch may be short)."""
    return max(1, math.ceil(n_train / effective_batch(batch_size, n_train)))


def passes_per_epoch(n_train: int, batch_size: int, epochs: int | None, min_steps: int) -> int:
    """Whole passes over the training split per epoch: the fewest that make `epochs` epochs at
    least `min_steps` optimiser steps; 1 when one pass per epoch already does (or no budget)."""
    if not epochs or min_steps <= 1:
        return 1
    return max(1, math.ceil(min_steps / (epochs * batches_per_pass(n_train, batch_size))))


def steps_per_epoch(n_train: int, batch_size: int, epochs: int | None, min_steps: int) -> int:
    """Optimiser steps in one (possibly lengthened) epoch."""
    return passes_per_epoch(n_train, batch_size, epochs, min_steps) * batches_per_pass(n_train, batch_size)
