"""Where things are kept, and the rules for keeping them whole.

    paths.py        where each stage reads and writes (data/, results/, reports/), built from names
    files.py        outputs written whole or not at all; JSON read back with one-line errors
    schema.py       the fields each stage reads from an earlier stage's JSON record, checked
    staging.py      several files moved into place together (the report)
    locks.py        one driver per output (flock under .ctsweep/locks/)
    staleness.py    which of a stage's outputs are still current (code, params, data digests)
    ray_storage.py  `search.storage_path`, where Ray Tune keeps experiment checkpoints
    tracking.py     MLflow: the store, experiments, runs and their tags, retries on a locked SQLite
    postgres.py     the project's own PostgreSQL (start, stop, its password file)
    database_url.py postgresql:// URLs checked before Ray starts (one line, the password masked)
    tracking_server.py  the `mlflow server` of `make mlflow-server`, started, killed, restarted from Python

Imports: errors, names, runtime.
"""
