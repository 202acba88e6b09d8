"""The `local` dataset kind: a user's own files (LocalParams in pipeline/dataset_params.py).

    dataset.py    formats, splits and what is inferred from the labels; `build`
    files.py      the path's layout, per-file checks, `fetch` (copies into data/raw, data/raw.lock)
    long_csv.py   the long CSV layout (shared with `ctsweep predict`)
    npz.py        .npz splits in the processed-dataset contract
"""

from pipeline.data.local.dataset import build, raw_files
from pipeline.data.local.files import fetch

__all__ = ["build", "fetch", "raw_files"]
