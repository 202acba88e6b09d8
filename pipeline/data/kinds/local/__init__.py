"""The `local` dataset kind: a user's own files (LocalParams in pipeline/config/datasets.py).

    dataset.py    formats and splits; `build`
    task.py       what is inferred from the training labels (task, class names)
    files.py      the path's layout, per-file checks, `fetch` (copies into data/raw, data/raw.lock)
    long_csv.py   the long CSV layout (shared with `ctsweep predict`)
    npz.py        .npz splits in the processed-dataset contract

Imports: errors, config, data, data.kinds.uea.
"""

from pipeline.data.kinds.local.dataset import build, raw_files
from pipeline.data.kinds.local.files import fetch

__all__ = ["build", "fetch", "raw_files"]
