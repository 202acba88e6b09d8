"""A processed dataset's identity: what its arrays hold, never when they were written.

`prepare` writes each split's .npz with fixed zip timestamps and a `digest.json` holding the
sha256 of each split's arrays (name, dtype, shape and bytes of x, t, mask, y). Preparing the same
data again therefore writes the same bytes: DVC sees an unchanged output and skips the stages
downstream, and the fingerprint below, which the search and final stages resume by and the input
cache is keyed by, stays the same, so no finished seed or search trial is run again.

A dataset without digest.json (written before digest.json existed, or the file removed) cannot
be verified: `search`, `final`, `classical` and `report` refuse it in one line naming
`ctsweep prepare` (require_digest, and pipeline.data.contract.load_dataset). Its fingerprint is
still the one it had (meta.json's content, each .npz's size and modification time), which only
names it.
"""

from __future__ import annotations

import hashlib
import json
import zipfile
from pathlib import Path

import numpy as np

DIGEST_FILE = "digest.json"
_EPOCH = (1980, 1, 1, 0, 0, 0)  # the earliest time a zip entry can carry
_SPLITS = ("train", "val", "test")  # pipeline.data.contract.SPLITS, which imports this module


def write_npz(path: Path, arrays: dict[str, np.ndarray]) -> None:
    """np.savez_compressed with reproducible bytes.

    numpy stamps each member with the current time (and offers no option against it), so two
    writes of the same arrays differ; here every member carries `_EPOCH`. The members are numpy's
    own .npy format, so np.load reads the file as any .npz.
    """
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED, allowZip64=True) as zf:
        for name, array in arrays.items():
            info = zipfile.ZipInfo(f"{name}.npy", date_time=_EPOCH)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o600 << 16
            with zf.open(info, "w", force_zip64=True) as member:
                np.lib.format.write_array(member, np.asanyarray(array), allow_pickle=False)


def arrays_digest(arrays: dict[str, np.ndarray]) -> str:
    """sha256 of the arrays' names, dtypes, shapes and C-order bytes, in name order."""
    digest = hashlib.sha256()
    for name in sorted(arrays):
        array = np.ascontiguousarray(arrays[name])
        digest.update(f"{name}:{array.dtype.str}:{array.shape}\n".encode())
        digest.update(array)  # the buffer itself, no copy
    return digest.hexdigest()


def digest_json(split_digests: dict[str, str]) -> str:
    """digest.json's text: {split: arrays_digest}."""
    return json.dumps(dict(sorted(split_digests.items())), indent=2) + "\n"


def changed_splits(recorded: dict[str, str], splits: dict[str, dict[str, np.ndarray]]) -> list[str]:
    """The splits whose arrays (as loaded: {split: {name: array}}) differ from digest.json's
    `recorded` digests: changed since prepare wrote them."""
    return [name for name, arrays in splits.items() if recorded.get(name) != arrays_digest(arrays)]


def fingerprint(folder: Path) -> str:
    """16 hex digits naming the processed dataset in `folder`: from meta.json and digest.json, or,
    for a dataset written before digest.json existed, meta.json and each split's size and mtime."""
    digest = hashlib.sha256((folder / "meta.json").read_bytes())
    contents = folder / DIGEST_FILE
    if contents.is_file():
        digest.update(contents.read_bytes())
        return digest.hexdigest()[:16]
    for name in _SPLITS:
        stat = (folder / f"{name}.npz").stat()
        digest.update(f"{name}:{stat.st_size}:{stat.st_mtime_ns}".encode())
    return digest.hexdigest()[:16]


def require_digest(folder: Path) -> None:
    """CorruptInputError when the prepared dataset in `folder` (its meta.json there) has no
    digest.json: nothing says its arrays are still the ones prepare wrote, and a search or final
    stage on changed arrays would replace the results made from the earlier ones. A folder that
    is not prepared at all is left to the stage's own message."""
    from pipeline.errors import CorruptInputError

    if (folder / "meta.json").is_file() and not (folder / DIGEST_FILE).is_file():
        raise CorruptInputError(unverified_message(folder))


def unverified_message(folder: Path) -> str:
    return (f"{folder / DIGEST_FILE} does not exist, so the prepared data in {folder} cannot be verified (prepared "
            f"by a ctsweep before digest.json, or the file was removed: its arrays may have changed since); run "
            f"`ctsweep prepare {folder.name}` (or `dvc repro`) again, which writes it")
