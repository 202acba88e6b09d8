"""The classical reference: what a classical model that trains in seconds on one core scores on the
same split, so that a table's numbers can be read against what a reader would use instead.

    choice.py    which of aeon's classifiers (or, for a per-step task, scikit-learn's one-step ridge
                 or logistic regression) accepts a processed dataset, or why none does
    fit.py       trains it on train + validation and predicts test, in a child process with a
                 time limit, on one core
    stage.py     `ctsweep classical DATASET` -> results/DATASET/classical.json (a DVC stage per
                 dataset: not retrained while the processed data and `classical` params stay the same)

What the report shows of it (a row under the table, a line beneath, metrics.json's entry) is the
report stage's: pipeline/reporting/classical_reference.py.

Imports: errors, runtime, stores, config, data, training.
"""
