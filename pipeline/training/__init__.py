"""Training: the one loop every family shares in search trials and final seeds alike (loop.py:
model building, the loss, epochs, early stopping, budgets) and the metrics a dataset names,
computed from raw model outputs (metrics.py), and the one rule that picks the best epoch, trial
or seed (selection.py).

Imports: errors, runtime, models, config, data.
"""
