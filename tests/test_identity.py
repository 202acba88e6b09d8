"""A processed dataset's identity: the same arrays prepared again are the same files and fingerprint."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import numpy as np
import pytest

from pipeline.config import XorParams
from pipeline.data.contract import Dataset, Split, load_dataset, save_dataset
from pipeline.data.identity import DIGEST_FILE, arrays_digest, fingerprint, write_npz
from pipeline.data.inputs import cache_dir
from pipeline.data.kinds.xor import build as build_xor

FILES = ("digest.json", "meta.json", "test.npz", "train.npz", "val.npz")


def _xor(seed: int = 2) -> Dataset:
    return build_xor("x", XorParams(kind="xor", n_train=60, n_test=20, seed=seed))


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    out = tmp_path / "data" / "processed" / "x"
    save_dataset(out, _xor())
    return out


def _files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def test_preparing_the_same_data_again_writes_the_same_bytes_and_fingerprint(folder: Path) -> None:
    before, fp, cache = _files(folder), fingerprint(folder), cache_dir(folder)
    assert tuple(before) == FILES
    save_dataset(folder, _xor())  # new files, new modification times
    assert _files(folder) == before  # DVC sees the same output: nothing downstream reruns
    assert fingerprint(folder) == fp and cache_dir(folder) == cache
    os.utime(folder / "train.npz", ns=(1, 1))
    assert fingerprint(folder) == fp  # a file's time is not its content


def test_digest_json_names_each_splits_arrays(folder: Path) -> None:
    digests = json.loads((folder / DIGEST_FILE).read_text())
    data = load_dataset(folder)
    assert digests == {name: arrays_digest({"x": s.x, "t": s.t, "mask": s.mask, "y": s.y})
                       for name, s in data.splits.items()}
    assert len(set(digests.values())) == 3


def test_one_changed_value_changes_the_fingerprint_and_that_splits_digest_only(folder: Path) -> None:
    fp, digests = fingerprint(folder), json.loads((folder / DIGEST_FILE).read_text())
    data = load_dataset(folder)
    val = data.splits["val"]
    x = val.x.copy()
    x[0, 0, 0] += 1.0
    save_dataset(folder, Dataset(data.meta, {**data.splits, "val": Split(x, val.t, val.mask, val.y)}))
    after = json.loads((folder / DIGEST_FILE).read_text())
    assert fingerprint(folder) != fp
    assert [name for name in digests if digests[name] != after[name]] == ["val"]


def test_a_dataset_written_before_digest_json_keeps_its_earlier_fingerprint(folder: Path) -> None:
    (folder / DIGEST_FILE).unlink()  # as an earlier ctsweep wrote it
    earlier = hashlib.sha256((folder / "meta.json").read_bytes())  # that version's formula
    for name in ("train", "val", "test"):
        stat = (folder / f"{name}.npz").stat()
        earlier.update(f"{name}:{stat.st_size}:{stat.st_mtime_ns}".encode())
    assert fingerprint(folder) == earlier.hexdigest()[:16]  # its kept seeds and searches resume
    save_dataset(folder, _xor())
    assert fingerprint(folder) != earlier.hexdigest()[:16] and (folder / DIGEST_FILE).is_file()


def test_the_npz_files_read_back_as_numpy_writes_them(tmp_path: Path) -> None:
    arrays = {"x": np.random.default_rng(0).normal(size=(3, 5, 2)).astype(np.float32),
              "mask": np.array([[True, False]] * 3), "y": np.arange(3, dtype=np.int64)}
    write_npz(tmp_path / "a.npz", arrays)
    with np.load(tmp_path / "a.npz", allow_pickle=False) as z:
        assert sorted(z.files) == ["mask", "x", "y"]
        assert all(z[k].dtype == v.dtype and np.array_equal(z[k], v) for k, v in arrays.items())
    write_npz(tmp_path / "b.npz", arrays)
    assert (tmp_path / "a.npz").read_bytes() == (tmp_path / "b.npz").read_bytes()
    assert arrays_digest(arrays) != arrays_digest({**arrays, "y": arrays["y"].astype(np.int32)})


def test_arrays_changed_behind_digest_json_are_refused_naming_the_file_and_the_command(folder: Path) -> None:
    from pipeline.errors import CorruptInputError

    with np.load(folder / "val.npz") as z:
        arrays = {k: z[k] for k in z.files}
    arrays["y"] = arrays["y"][::-1].copy()  # well-formed, other labels: the shapes pass, the content does not
    np.savez_compressed(folder / "val.npz", **arrays)
    with pytest.raises(CorruptInputError, match=r"val\.npz is corrupt \(its arrays differ from what digest\.json "
                                                r"records: changed since prepare wrote them\); rebuild it with "
                                                r"`ctsweep prepare x`"):
        load_dataset(folder)
    (folder / DIGEST_FILE).write_text('{"train": "0"}')
    with pytest.raises(CorruptInputError, match=r"digest\.json is corrupt \(expected each of \['train', 'val', 'test'\]"):
        load_dataset(folder)
    (folder / DIGEST_FILE).unlink()  # a dataset from before digest.json, or the file removed: unverified (issue 73)
    with pytest.raises(CorruptInputError, match=r"digest\.json does not exist, so the prepared data in .* cannot be "
                                                r"verified .*; run `ctsweep prepare x` \(or `dvc repro`\) again"):
        load_dataset(folder)
