"""Building blocks several lineages share: the continuous path [t, x] and its solver helpers for
models that read an interpolated path (cde.py; its causal Hermite path for per-step tasks in
causal_path.py), log-signature window inputs (logsig.py) and the token embedding in front of any
family that reads raw values (embedding.py).

Imports: errors, models.builtin, models.base.
"""
