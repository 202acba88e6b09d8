"""Training: the one loop every family shares in search trials and final seeds alike (loop.py:
model building, the loss, epochs, the gradient's clip and check), how long a final seed trains
(stopping.py: patience, never before budget.MIN_STEPS steps, the epoch budget and the wall-clock
cap), epochs counted in optimiser steps (budget.py), the metrics a dataset names,
computed from raw model outputs (metrics.py), and the one rule that picks the best epoch, trial
or seed (selection.py).

Imports: errors, runtime, models, config, data.
"""
