"""How a sweep runs: the `search` stage, from its driver to each trial and what is learned after.

    search        the stage's driver: one Ray Tune run per dataset searching its families at
                  once, resumed after a restart, a record per family written to
                  results/<dataset>/search/<family>.json
    plans         each family's part, checked before Ray starts: its space for the dataset (the
                  model built at its corners), the fingerprint of what it searches, its record's
                  path, its trials' context
    epoch_time    a trial time limit measured against one epoch of the family's reference,
                  refused before Ray starts when it cannot hold one
    parents       each family's MLflow parent run: opened, found again and resumed, closed
    tuner         the Ray Tune run: one trainable for every family, the family searcher and
                  scheduler, and what Ray kept of them after a restore
    families      a searcher holding one Optuna study per family and search repeat, told in
                  rounds (never in arrival order; one or more rounds in flight), and a
                  scheduler holding one ASHA per family
                  and repeat, so the searches share the trial slots and nothing else
    records       what a search's trials came to: per-trial records, their MLflow runs closed
                  with Tune's outcome, the family's record (best configuration or reasons) and
                  its Optuna study persisted
    trial         one Tune trial: train, log to MLflow and report every epoch, checkpoint on a clock
    trial_keys    the bookkeeping keys of a trial's config (family, repeat, Optuna trial number)
                  and their readers, standard library only: no Optuna in a trial process
    context       what a trial process needs (TrialContext, the dataset as its node sees it),
                  shared by trial and distributed so that neither imports the other's module
    scheduling    Optuna's TPE searcher (ASHA-stopped trials told as PRUNED, failed ones as
                  FAIL) and the ASHA scheduler, judging a trial against earlier rounds only,
                  its rungs refilled from MLflow after a restore
    distributed   data-parallel trials: a Tune trial that drives a Ray Train run of several workers
    cluster       connecting to Ray (RAY_ADDRESS or a local instance), resource and shared
                  storage checks before any trial starts (the final stage uses it too)
    saturation    `search.saturation`: a family's search goes on while its expected best rises,
                  its rounds granted from one budget per dataset in a fixed order of priority
    sensitivity   each search's Optuna study, persisted; fANOVA hyperparameter importances
    run_lookup    finding MLflow runs again after a restart (a trial's run, an unfinished parent)

The flow: `ctsweep search` calls search.search_datasets (search_many for one dataset), which
checks each (dataset, family)'s plan (plans) before Ray starts, connects through cluster, opens (or finds again, through run_lookup) each
family's MLflow parent run (parents) and starts one Tuner (tuner) whose trainable is
trial.run_family_trial: the trial's family (a config key; "<dataset>/<family>" when datasets share
the run, `search.share_datasets`) picks its context.TrialContext and
trial.run_trial trains it. families' searcher asks each family's scheduling searcher (most work left first) for
a configuration, each family's ASHA stops its weak trials early; a trial asking for several
workers hands its training to distributed.run_data_parallel. When the Tuner ends, records turns
each family's trials into its record and copies its study to the project's Optuna storage, where
sensitivity computes the importances; parents closes each parent run with the outcome.

Import-free on purpose: importing pipeline.sweep loads no Ray, Optuna or MLflow; import the
module you need (`from pipeline.sweep.search import search`). Within this package the modules
import each other without a cycle (tests/test_layout.py checks it).

Imports: errors, names, runtime, stores, progress, models, config, data, spaces, training, comparison.
"""
