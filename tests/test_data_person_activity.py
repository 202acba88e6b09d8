"""Person Activity (UCI ConfLongDemo_JSI.txt) through the real fetch + prepare path.

The fixture file has the UCI format (sequence, tag, ticks, date, x, y, z, activity) and encodes
each row's recording and row number in its x and y coordinates, so every window can be traced
back to the rows it was cut from.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from pipeline.config import PersonActivityParams
from pipeline.errors import DataError
from tests.conftest import prepare_served

TAGS = ["010-000-024-033", "010-000-030-096", "020-000-033-111", "020-000-032-221"]
# The 11 activities of the UCI file and the class each merges into (ODE-LSTM's class_map),
# written out independently of the module.
MERGE = {
    "lying down": 0, "lying": 0, "sitting down": 1, "sitting": 1, "standing up from lying": 2,
    "standing up from sitting": 2, "standing up from sitting on the ground": 2, "walking": 3,
    "falling": 4, "on all fours": 5, "sitting on the ground": 6,
}
ACTIVITIES = list(MERGE)
T0 = 633790226051280329  # a real-looking .NET tick count (100 ns units)
# recording name -> rows; a recording of 32 rows gives no window (starts range(0, n - 32, 16)).
# The file's last recording is kept (ODE-LSTM's loop loses it).
RECORDINGS = {"A01": 200, "A02": 150, "C02": 32, "B01": 97, "E05": 48}
EXPECTED_STARTS = {"A01": list(range(0, 168, 16)), "A02": list(range(0, 118, 16)), "C02": [],
                   "B01": [0, 16, 32, 48, 64], "E05": [0]}


def recording_ticks(name: str, n: int) -> np.ndarray:
    """Row timestamps: A01 regular (every 27 ms), the others irregular."""
    if name == "A01":
        return T0 + 270_000 * np.arange(n, dtype=np.int64)
    gaps = np.random.default_rng(len(name) + n).integers(1, 3_000_000, size=n)
    return T0 + np.cumsum(gaps).astype(np.int64)


def person_lines(recordings: dict[str, int] = RECORDINGS) -> tuple[list[str], dict]:
    """The file's lines and, per recording, its ticks and activity names."""
    lines, truth = [], {}
    for r, (name, n) in enumerate(recordings.items()):
        ticks = recording_ticks(name, n)
        acts = [ACTIVITIES[(i // 7 + r) % len(ACTIVITIES)] for i in range(n)]
        for i in range(n):
            # x = recording number, y = row number, z = something irregular
            lines.append(f"{name},{TAGS[(i + r) % 4]},{ticks[i]},27.05.2009 14:03:25:127,"
                         f"{r}.0,{i}.0,{np.sin(i):.6f},{acts[i]}")
        truth[name] = {"ticks": ticks, "acts": acts, "r": r}
    return lines, truth


def write_person(root: Path, lines: list[str]) -> None:
    (root / "ConfLongDemo_JSI.txt").write_text("\n".join(lines) + "\n")


def run(tmp_path: Path, server, **params):
    return prepare_served(tmp_path, server, "person", PersonActivityParams(kind="person_activity", **params))


def raw_x(ds, split: str) -> np.ndarray:
    mean, std = np.array(ds.meta.norm_mean), np.array(ds.meta.norm_std)
    return ds.splits[split].x.astype(np.float64) * std + mean


def test_features_windows_labels_and_times(tmp_path, http_server):
    lines, truth = person_lines()
    write_person(http_server.root, lines)
    meta, ds = run(tmp_path, http_server)

    assert meta.task == "classification" and meta.per_step and meta.metric == "accuracy"
    assert meta.output_size == 7 and len(meta.classes) == 7
    assert meta.channels[:4] == ["tag_ankle_left", "tag_ankle_right", "tag_chest", "tag_belt"]
    assert meta.channels[4:] == ["x", "y", "z"]
    n_expected = sum(len(s) for s in EXPECTED_STARTS.values())
    assert sum(meta.sizes.values()) == n_expected == 25

    seen = set()
    for split in ("train", "val", "test"):
        s = ds.splits[split]
        assert s.x.shape == (len(s), 32, 7) and s.x.dtype == np.float32
        assert s.y.shape == (len(s), 32) and s.y.dtype == np.int64
        assert s.t.dtype == np.float32 and s.mask.all() and not np.isnan(s.x).any()
        x = raw_x(ds, split)
        onehot = x[..., :4]
        np.testing.assert_allclose(onehot.sum(-1), 1.0, atol=1e-5)
        assert set(np.round(onehot, 5).ravel()) <= {0.0, 1.0}
        for w in range(len(s)):
            r, rows = int(round(x[w, 0, 4])), np.round(x[w, :, 5]).astype(int)
            name = list(RECORDINGS)[r]
            start = rows[0]
            np.testing.assert_array_equal(rows, np.arange(start, start + 32))  # contiguous rows
            assert (name, start) not in seen
            seen.add((name, start))
            tag = (rows + r) % 4
            np.testing.assert_array_equal(np.argmax(onehot[w], -1), tag)
            np.testing.assert_allclose(x[w, :, 6], np.sin(rows), atol=1e-4)
            acts = truth[name]["acts"]
            np.testing.assert_array_equal(s.y[w], [MERGE[acts[i]] for i in rows])
            # times in units of 100 ms (10**6 ticks), from the row before the window; 5.0 before row 0
            ticks = truth[name]["ticks"]
            before = ticks[start - 1] if start > 0 else None
            expected = ((ticks[rows] - before) / 1e6 if before is not None
                        else 5.0 + (ticks[rows] - ticks[0]) / 1e6)
            np.testing.assert_allclose(s.t[w], expected, rtol=1e-6)
    assert seen == {(n, st) for n, starts in EXPECTED_STARTS.items() for st in starts}


def test_hand_computed_window_times(tmp_path, http_server):
    """A01 ticks every 27 ms: the window at row 16 has t = 0.27, 0.54, ...; the one at row 0 starts at 5.0."""
    lines, _ = person_lines()
    write_person(http_server.root, lines)
    _, ds = run(tmp_path, http_server)
    found = {}
    for split in ("train", "val", "test"):
        x = raw_x(ds, split)
        for w in range(len(x)):
            if round(x[w, 0, 4]) == 0 and round(x[w, 0, 5]) in (0, 16):
                found[int(round(x[w, 0, 5]))] = ds.splits[split].t[w]
    np.testing.assert_allclose(found[16], 0.27 * np.arange(1, 33), rtol=1e-6)
    np.testing.assert_allclose(found[0], 5.0 + 0.27 * np.arange(32), rtol=1e-6)


def test_all_eleven_activities_merge_to_seven(tmp_path, http_server):
    lines, _ = person_lines()
    write_person(http_server.root, lines)
    meta, ds = run(tmp_path, http_server)
    labels = np.concatenate([ds.splits[k].y.ravel() for k in ("train", "val", "test")])
    assert set(labels.tolist()) == set(range(7))
    assert meta.classes[MERGE["standing up from sitting on the ground"]] == "standing up"
    assert meta.classes[MERGE["lying down"]] == meta.classes[MERGE["lying"]] == "lying"


def test_split_follows_reference_permutation(tmp_path, http_server):
    lines, _ = person_lines()
    write_person(http_server.root, lines)
    meta, ds = run(tmp_path, http_server)
    order = [(n, st) for n, starts in EXPECTED_STARTS.items() for st in starts]  # file order
    n = len(order)
    perm = np.random.RandomState(98841).permutation(n)
    n_test = int(0.2 * n)
    n_val = int(0.1 * (n - n_test))
    assert meta.sizes == {"train": n - n_test - n_val, "val": n_val, "test": n_test}

    def ids(split):
        x = raw_x(ds, split)
        return {(list(RECORDINGS)[int(round(w[0, 4]))], int(round(w[0, 5]))) for w in x}

    assert ids("test") == {order[i] for i in perm[:n_test]}
    assert ids("val") == {order[i] for i in perm[n_test:n_test + n_val]}
    assert ids("train") == {order[i] for i in perm[n_test + n_val:]}


def test_the_rows_test_windows_share_with_training_windows_are_stated(tmp_path, http_server):
    """Review N7: windows overlap (stride 16 of 32) and are split at random, as in the papers."""
    lines, _ = person_lines()
    write_person(http_server.root, lines)
    meta, ds = run(tmp_path, http_server)

    def rows(split):  # every (recording, row) a split's windows hold, from the windows' own traces
        return {(rec, start + k) for rec, start in (
            (list(RECORDINGS)[int(round(w[0, 4]))], int(round(w[0, 5]))) for w in raw_x(ds, split)) for k in range(32)}

    shared = {s: 100 * len(rows(s) & rows("train")) / len(rows(s)) for s in ("test", "val")}
    assert 0 < shared["test"] < 100
    assert meta.provenance == (f"overlapping windows: {shared['test']:.1f} % of test rows and {shared['val']:.1f} % "
                               f"of validation rows also lie in a training window (the papers' protocol)")


def test_train_statistics_standardise(tmp_path, http_server):
    lines, _ = person_lines()
    write_person(http_server.root, lines)
    _, ds = run(tmp_path, http_server)
    train = ds.splits["train"].x.reshape(-1, 7)
    np.testing.assert_allclose(train.mean(0), 0.0, atol=1e-4)
    np.testing.assert_allclose(train.std(0), 1.0, atol=1e-3)


@pytest.mark.parametrize("bad, message", [
    ("A02,010-000-024-033,633790226051280329,27.05.2009 14:03:25:127,1.0,2.0,3.0,dancing", "'dancing'"),
    ("A02,999-000-000-000,633790226051280329,27.05.2009 14:03:25:127,1.0,2.0,3.0,walking", "'999-000-000-000'"),
    ("A02,010-000-024-033,633790226051280329,27.05.2009 14:03:25:127,1.0,2.0,walking", "expected 8"),
    ("A02,010-000-024-033,633790226051280329,27.05.2009 14:03:25:127,1.0,abc,3.0,walking", "'abc'"),
])
def test_bad_row_names_line_and_writes_nothing(tmp_path, http_server, bad, message):
    lines, _ = person_lines()
    lines.insert(230, bad)  # becomes line 231
    write_person(http_server.root, lines)
    with pytest.raises(DataError, match="line 231") as err:
        run(tmp_path, http_server)
    assert message in str(err.value) and "ConfLongDemo_JSI.txt" in str(err.value)
    processed = tmp_path / "processed"
    assert not processed.exists() or not any(processed.iterdir())


def test_rows_out_of_time_order_are_sorted_within_a_recording(tmp_path, http_server):
    lines, _ = person_lines()
    write_person(http_server.root, lines)
    _, expected = run(tmp_path / "a", http_server)
    lines[20], lines[21] = lines[21], lines[20]  # two A01 rows swapped in the file
    write_person(http_server.root, lines)
    _, got = run(tmp_path / "b", http_server)
    for split in ("train", "val", "test"):
        np.testing.assert_array_equal(got.splits[split].x, expected.splits[split].x)
        np.testing.assert_array_equal(got.splits[split].t, expected.splits[split].t)
        assert (np.diff(got.splits[split].t, axis=1) >= 0).all()
