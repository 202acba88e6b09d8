"""Walker2d kinematics (walker.zip of .npy rollouts) through the real fetch + prepare path.

Fixture rollouts encode their file number in column 0 and their row number in column 1, so
every input step and target can be traced back to the file row it came from.
"""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

import numpy as np
import pytest

from pipeline.config import Walker2dParams
from pipeline.errors import DataError
from tests.conftest import prepare_served

N_FILES = 20  # -> 3 test, 2 validation, 15 train files (int(0.15 n), int(0.25 n))
LENGTHS = [150 + 7 * i for i in range(N_FILES)]


def rollout(i: int, length: int) -> np.ndarray:
    rng = np.random.default_rng(i)
    arr = rng.normal(size=(length, 17))
    arr[:, 0] = i
    arr[:, 1] = np.arange(length)
    return arr  # float64, as in the real files


def member(i: int) -> str:
    return f"walker/rollout_{i:03d}.npy"


def npy_bytes(arr: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, arr)
    return buf.getvalue()


def write_zip(root: Path, arrays: dict[str, bytes], junk: bool = True) -> None:
    with zipfile.ZipFile(root / "walker.zip", "w") as z:
        z.writestr("walker/", b"")
        for name, data in arrays.items():
            z.writestr(name, data)
        if junk:  # macOS metadata a zip made on a Mac carries; must be ignored
            z.writestr("__MACOSX/walker/._rollout_000.npy", b"\x00\x05\x16\x07junk")


def fixture_arrays() -> dict[str, np.ndarray]:
    return {member(i): rollout(i, n) for i, n in enumerate(LENGTHS)}


def run(tmp_path: Path, server, **params):
    return prepare_served(tmp_path, server, "walker", Walker2dParams(kind="walker2d", **params))


def raw_x(ds, split: str) -> np.ndarray:
    mean, std = np.array(ds.meta.norm_mean), np.array(ds.meta.norm_std)
    return ds.splits[split].x.astype(np.float64) * std + mean


@pytest.fixture
def served(http_server):
    arrays = fixture_arrays()
    write_zip(http_server.root, {k: npy_bytes(v) for k, v in arrays.items()})
    return http_server, arrays


def test_shapes_meta_and_next_step_targets(tmp_path, served):
    server, arrays = served
    meta, ds = run(tmp_path, server)
    assert meta.task == "regression" and meta.per_step and meta.metric == "mse" and meta.output_size == 17
    assert len(meta.channels) == 17
    for split in ("train", "val", "test"):
        s = ds.splits[split]
        assert s.x.shape == (len(s), 64, 17) and s.y.shape == (len(s), 64, 17)
        assert s.x.dtype == s.y.dtype == s.t.dtype == np.float32 and s.mask.all()
        x = raw_x(ds, split)
        files = np.round(x[:, 0, 0]).astype(int)
        rows = np.round(x[..., 1]).astype(int)  # (N, 64) file rows of the inputs
        for w in range(len(s)):
            arr = arrays[member(files[w])].astype(np.float32)
            np.testing.assert_allclose(x[w], arr[rows[w]], atol=1e-4)  # inputs are file rows
            np.testing.assert_array_equal(s.y[w], arr[rows[w] + 1])  # targets: the next file row, raw
            assert (np.diff(rows[w]) >= 1).all()
            # elapsed times are row gaps: t[0] from the kept row before the window
            np.testing.assert_array_equal(np.diff(s.t[w]), np.diff(rows[w]))


def test_file_level_split_follows_reference_shuffle(tmp_path, served):
    server, arrays = served
    _, ds = run(tmp_path, server)
    names = sorted(arrays)
    np.random.RandomState(125487).shuffle(names)
    expected = {"test": names[:3], "val": names[3:5], "train": names[5:]}
    got = {}
    for split in ("train", "val", "test"):
        got[split] = {member(int(f)) for f in np.round(raw_x(ds, split)[:, 0, 0]).astype(int)}
    for split in got:
        assert got[split] == set(expected[split])  # every file of the split gives windows here
    assert not (got["train"] & got["val"] or got["train"] & got["test"] or got["val"] & got["test"])


def test_drop_fraction_windows_and_stride(tmp_path, served):
    server, arrays = served
    _, ds = run(tmp_path, server)
    names = sorted(arrays)
    np.random.RandomState(125487).shuffle(names)
    order = names[5:] + names[3:5] + names[:3]  # train, val, test: the order draws are made in
    rng = np.random.RandomState(891374)
    kept = {n: np.flatnonzero(rng.rand(len(arrays[n]) - 1) < 0.9) for n in order}
    dropped = sum(len(arrays[n]) - 1 - len(k) for n, k in kept.items()) / sum(len(arrays[n]) - 1 for n in order)
    assert 0.07 < dropped < 0.13

    for split, split_names in (("train", names[5:]), ("val", names[3:5]), ("test", names[:3])):
        x = raw_x(ds, split)
        files = np.round(x[:, 0, 0]).astype(int)
        rows = np.round(x[..., 1]).astype(int)
        t = ds.splits[split].t
        expected = []
        for n in split_names:
            k = kept[n]
            for start in range(0, len(k) - 64, 16):
                expected.append((n, start))
        assert len(x) == len(expected)
        for w, (n, start) in enumerate(expected):  # windows in file order, stride 16 kept steps
            assert member(files[w]) == n
            np.testing.assert_array_equal(rows[w], kept[n][start:start + 64])
            clock = kept[n] + 1.0
            before = clock[start - 1] if start else 0.0
            np.testing.assert_array_equal(t[w], clock[start:start + 64] - before)


def test_no_drop_gives_unit_steps_and_hand_counted_windows(tmp_path, served):
    server, arrays = served
    meta, ds = run(tmp_path, server, drop_fraction=0.0)
    n_windows = sum(len(range(0, n - 1 - 64, 16)) for n in LENGTHS)
    assert sum(meta.sizes.values()) == n_windows
    for split in ("train", "val", "test"):
        t = ds.splits[split].t
        np.testing.assert_array_equal(np.diff(t, axis=1), 1.0)
        rows = np.round(raw_x(ds, split)[..., 1]).astype(int)
        np.testing.assert_array_equal(t, rows + 1 - np.where(rows[:, :1] > 0, rows[:, :1], 0))


def test_inputs_standardised_targets_raw(tmp_path, served):
    server, arrays = served
    meta, ds = run(tmp_path, server)
    train = ds.splits["train"].x.reshape(-1, 17)
    np.testing.assert_allclose(train[:, 2:].mean(0), 0.0, atol=1e-4)
    np.testing.assert_allclose(train[:, 2:].std(0), 1.0, atol=1e-3)
    assert abs(ds.splits["train"].y[..., 1].mean()) > 50  # row numbers, not standardised


def test_raw_scaling_feeds_the_simulator_s_units_as_the_reference_does(tmp_path, served):
    server, arrays = served
    _, standard = run(tmp_path / "standard", server)
    meta, ds = run(tmp_path / "raw", server, scaling="raw")
    for split in ("train", "val", "test"):
        # the same windows: the raw inputs are the standardised ones with the scaling undone
        np.testing.assert_allclose(ds.splits[split].x, raw_x(standard, split), rtol=1e-5, atol=1e-4)
        np.testing.assert_array_equal(ds.splits[split].y, standard.splits[split].y)
        np.testing.assert_array_equal(ds.splits[split].t, standard.splits[split].t)
    assert ds.meta.norm_mean == [0.0] * 17 and ds.meta.norm_std == [1.0] * 17  # serving scales nothing
    assert ds.meta.source.endswith("; inputs raw, as the reference feeds them")
    assert abs(ds.splits["train"].x[..., 1].mean()) > 50  # row numbers, as the targets


@pytest.mark.parametrize("bad, message", [
    (npy_bytes(np.zeros((100, 16))), "shape (100, 16)"),
    (npy_bytes(np.zeros(100)), "shape (100,)"),
    (b"not an npy file at all", "not a readable .npy"),
    (npy_bytes(np.full((100, 17), np.nan)), "non-finite"),
])
def test_bad_member_names_it_and_writes_nothing(tmp_path, http_server, bad, message):
    arrays = {k: npy_bytes(v) for k, v in fixture_arrays().items()}
    arrays[member(7)] = bad
    write_zip(http_server.root, arrays)
    with pytest.raises(DataError, match="rollout_007.npy") as err:
        run(tmp_path, http_server)
    assert message in str(err.value)
    processed = tmp_path / "processed"
    assert not processed.exists() or not any(processed.iterdir())


def test_too_few_rollouts_is_a_clear_error(tmp_path, http_server):
    write_zip(http_server.root, {member(i): npy_bytes(rollout(i, 150)) for i in range(5)})  # no val/test file
    with pytest.raises(DataError, match="split"):
        run(tmp_path, http_server)
