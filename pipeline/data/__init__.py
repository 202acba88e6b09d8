"""Data: the `fetch` and `prepare` stages and the processed-dataset contract every later stage reads.

    prepare.py    the stages: a dataset's kind module fetches its raw files and builds its splits
    download.py   raw downloads streamed, resumed, checked against the publisher's sha256 and data/raw.lock;
                  a mirror's copy that cannot be verified only with `--unverified-copy`
    raw_lock.py   data/raw.lock: each raw file's sha256, and the mark of a copy used unverified
    raw_note.py   data/raw/<dataset>/SOURCE.txt for a dataset with nothing to download (aeon's copies)
    provenance.py the data's provenance note (unverified copy, missing records) in meta.json, tags, records
    contract.py   data/processed/<dataset>/: the splits (x, t, mask, y) and meta.json, checked
    identity.py   the processed dataset's fingerprint from its arrays' content (digest.json), reproducible .npz
    inputs.py     model inputs (spline coefficients, log-signatures) built once per split
    kinds/        one module per dataset `kind` of params.yaml (uea, physionet2012, local, ...)

Imports: errors, runtime, stores, models, config.
"""
