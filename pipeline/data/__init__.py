"""Data: the `fetch` and `prepare` stages and the processed-dataset contract every later stage reads.

    prepare.py    the stages: a dataset's kind module fetches its raw files and builds its splits
    download.py   raw downloads streamed, resumed, checked against sha256 and data/raw.lock
    contract.py   data/processed/<dataset>/: the splits (x, t, mask, y) and meta.json, checked
    inputs.py     model inputs (spline coefficients, log-signatures) built once per split
    kinds/        one module per dataset `kind` of params.yaml (uea, physionet2012, local, ...)

Imports: errors, runtime, stores, models, config.
"""
