"""Progress of a running search or final stage: what has run, what runs now, how long is left.

    model.py     what a stage has done so far: a Unit per (dataset, family), a Snapshot per stage
    estimate.py  the time left, from the epochs trained so far and their measured times
    read.py      a Snapshot read from MLflow: by the stage's own driver, or by `ctsweep status`
    render.py    a Snapshot as one plain line or as a rich table
    display.py   `shown`: the live table on a terminal, plain lines in a log, while a stage runs

Imports: errors, runtime, stores.
"""
