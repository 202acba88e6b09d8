"""The dataset kinds, one module per `kind:` of a `prepare.<dataset>` section (pipeline/data/prepare.py
KINDS): each exposes raw_files(params) and build(name, params, raw_dir), following its source's
reference code (module docstrings). `local` is a user's own files (a subpackage of its own).

Imports: errors, config, data.contract, data.download, data.overlap.
"""
