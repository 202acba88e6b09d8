"""The report and what reads it: the `report` stage (results.md, metrics.json, plot data and PNGs)
built from the final and search records, its Markdown tables, plots, statistics (Welch's t-test,
ranking stability), the comparison across datasets (mean ranks, Wilcoxon-Holm, the critical-difference
diagram: cross_dataset.py, cross_tables.py, cross_plots.py), the papers' reference figures and the
best published results on UEA/UCR datasets, the provenance stamp, the marks that say
which cells of a results table cannot be trusted (not converged, best configuration at the edge
of its space, mostly failed searches, failed cells, no better than the trivial baselines that
stand under every table: trivial.py), the classical reference row beneath them
(classical_reference.py, reading what the classical stage wrote), each search's gain over its reference configuration
(search_gain.py), and `ctsweep status`, which reads those marks back from reports/metrics.json,
and `ctsweep compare`, which names the first difference between two project roots' results,
a difference of machine before any (compare.py). `promote` uses the same marks to refuse a candidate.

Imports: errors, runtime, stores, progress, config, data, training, comparison, sweep (budget.MIN_STEPS, the step floor the not-converged rule
shares with training; metrics.score, which scores the trivial baselines as trials are scored; data.contract,
the processed splits the trivial baselines read; sensitivity.MIN_TRIALS, the fewest trials an importance is
shown from).
"""
