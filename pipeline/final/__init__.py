"""The `final` stage: each family's best searched configuration retrained over fresh seeds, the
seeds of all of a dataset's families spread over Ray at once.

    stage.py    the stage's driver: plans, budgets, the learning-rate robustness reruns, records
    seeds.py    one seed as a Ray task, and all the seeds spread over the cluster
    resume.py   an interrupted stage found again: its MLflow parent run, its finished seeds
    repeats.py  the search's own variance: each search repeat's best, the spread of their means
    counts.py   accuracy's (correct, scored) counts per seed, and the exact means made of them
    race.py     `final.race`: one look at a dataset's seeds (separated, equivalent or open)
    racing.py   the race in the stage: provisional records after each round, the seeds it asks for

Imports: errors, names, runtime, stores, progress, models, config, data, spaces, training, comparison, serving, sweep.
Import-free: import the module you need (`from pipeline.final.stage import final_many`).
"""
