"""`ctsweep`: one command per DVC stage, each a thin wrapper over the stage's function (app.py;
the wrapper they share, stage.py), `ctsweep postgres` (postgres_commands.py),
and `ctsweep check`, everything a run would refuse at its start (check.py).

Imports: errors, names, runtime, stores, config, data, spaces, profiles, serving, families, sweep,
final, classical, reporting, registry.
"""

from pipeline.cli.app import app, main

__all__ = ["app", "main"]
