"""The `promote` stage and the MLflow Model Registry: each dataset's best family registered as
`ctsweep-<dataset>`, and the rule that decides whether it takes the alias `champion`
(promote.py).

Imports: errors, runtime, stores, config, comparison, reporting.
"""
