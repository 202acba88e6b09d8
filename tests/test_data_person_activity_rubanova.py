"""Person Activity, `variant: rubanova` (Latent ODE's preprocessing, used by Temporal Weights),
through the real fetch + prepare path.

The fixture file has the UCI format (sequence, tag, ticks, date, x, y, z, activity). Its rows are
placed on a known grid of 10 ms bins (10**5 ticks of 100 ns): bin k of a recording starts at
bin index b_k (irregular gaps), so every expected step, time and label is computed here from
the bin plan, independently of the module. Each ordinary bin holds one reading of one tag with
x = recording number, y = k, z = sin(k); a few bins hold several readings (averaged, mixed
activities) and a second reading 4 ms later (the same bin).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from pydantic import ValidationError

from pipeline.config import PersonActivityParams, load_params
from pipeline.errors import ConfigError, DataError
from tests.conftest import default_params, prepare_served, write_params

TAGS = ["010-000-024-033", "010-000-030-096", "020-000-033-111", "020-000-032-221"]  # l/r ankle, chest, belt
# Rubanova's merge of the file's 11 activities into 7 (latent_ode person_activity.py label_dict),
# written out here; "standing up from sitting on the ground" is his "standing up from sit on grnd".
MERGE = {
    "walking": 0, "falling": 1, "lying": 2, "lying down": 2, "sitting": 3, "sitting down": 3,
    "standing up from lying": 4, "standing up from sitting": 4, "standing up from sitting on the ground": 4,
    "on all fours": 5, "sitting on the ground": 6,
}
ACTIVITIES = list(MERGE)
T0 = 633790226051280329
BIN = 100_000  # ticks in 10 ms
# recording -> bins; starts are range(0, bins - 50, 25): 10, 0, 2 and 1 chunks. The last
# recording (E05) is kept, as Rubanova's loop saves it after the file ends.
RECORDINGS = {"A01": 300, "A02": 50, "B01": 76, "E05": 51}
EXPECTED_STARTS = {"A01": list(range(0, 250, 25)), "A02": [], "B01": [0, 25], "E05": [0]}
WINDOW = 50


def bin_index(name: str, n: int) -> np.ndarray:
    """b_k: each bin's index in 10 ms units since the recording's first row (gaps of 1-5 bins)."""
    gaps = 1 + (np.arange(n) * 7 + len(name)) % 5
    return np.concatenate([[0], np.cumsum(gaps[1:])]).astype(np.int64)


def activity(r: int, k: int) -> str:
    return ACTIVITIES[(k // 7 + r) % len(ACTIVITIES)]


def line(name: str, tag: int, ticks: int, xyz: tuple[float, float, float], act: str) -> str:
    return f"{name},{TAGS[tag]},{ticks},27.05.2009 14:03:25:127,{xyz[0]!r},{xyz[1]!r},{xyz[2]!r},{act}"


def person_lines() -> tuple[list[str], dict]:
    """The file's lines and, per recording, per bin: its index, label and 12 expected values."""
    lines, truth = [], {}
    for r, (name, n) in enumerate(RECORDINGS.items()):
        b = bin_index(name, n)
        values = np.full((n, 12), np.nan)
        labels = np.zeros(n, np.int64)
        for k in range(n):
            start = T0 + int(b[k]) * BIN
            tag, xyz, act = k % 4, (float(r), float(k), math.sin(k)), activity(r, k)
            rows = [(tag, start, xyz, act)]
            if name == "A01" and k == 1:
                # Same tag again 4 ms later (the same bin: averaged) and the belt 2 ms later; the
                # bin's activities are sitting (3), falling (1), on all fours (5): its label is 1.
                rows = [(1, start, (0.0, 1.0, 10.0), "sitting"), (1, start + 40_000, (0.0, 1.0, 20.0), "falling"),
                        (3, start + 20_000, (0.0, 1.0, -5.0), "on all fours")]
            for tag_, ticks, xyz_, act_ in rows:
                lines.append(line(name, tag_, ticks, xyz_, act_))
            for tag_ in {t for t, *_ in rows}:
                values[k, 3 * tag_: 3 * tag_ + 3] = np.mean([x for t, _, x, _ in rows if t == tag_], axis=0)
            labels[k] = min(MERGE[a] for *_, a in rows)
        truth[name] = {"bins": b, "values": values, "labels": labels, "r": r}
    return lines, truth


def write_person(root: Path, lines: list[str]) -> None:
    (root / "ConfLongDemo_JSI.txt").write_text("\n".join(lines) + "\n")


def run(tmp_path: Path, server, **params):
    p = PersonActivityParams(kind="person_activity", variant="rubanova", **params)
    return prepare_served(tmp_path, server, "person_rubanova", p)


def raw_x(ds, split: str) -> np.ndarray:
    mean, std = np.array(ds.meta.norm_mean), np.array(ds.meta.norm_std)
    return ds.splits[split].x.astype(np.float64) * std + mean


def chunk_id(x: np.ndarray) -> tuple[str, int]:
    """(recording, first bin) of a de-standardised chunk x (window, 12): x = r, y = k."""
    first = x[0][~np.isnan(x[0])]
    return list(RECORDINGS)[int(round(first[0]))], int(round(first[1]))


@pytest.fixture
def served(http_server):
    lines, truth = person_lines()
    write_person(http_server.root, lines)
    http_server.truth = truth
    return http_server


def test_twelve_channels_seven_classes_chunks_of_fifty_bins(tmp_path, served):
    meta, ds = run(tmp_path, served)
    truth = served.truth
    assert (meta.task, meta.per_step, meta.metric, meta.output_size) == ("classification", True, "accuracy", 7)
    assert len(meta.channels) == 12 and meta.channels[:3] == ["ankle_left_x", "ankle_left_y", "ankle_left_z"]
    assert meta.channels[9:] == ["belt_x", "belt_y", "belt_z"]
    assert meta.classes == ["walking", "falling", "lying", "sitting", "standing up", "on all fours",
                            "sitting on the ground"]
    assert sum(meta.sizes.values()) == 13 == sum(len(s) for s in EXPECTED_STARTS.values())

    seen = set()
    for split in ("train", "val", "test"):
        s = ds.splits[split]
        assert s.x.shape == (len(s), WINDOW, 12) and s.x.dtype == np.float32
        assert s.y.shape == (len(s), WINDOW) and s.y.dtype == np.int64 and s.mask.all()
        x = raw_x(ds, split)
        for w in range(len(s)):
            name, start = chunk_id(x[w])
            seen.add((name, start))
            rec = truth[name]
            rows = np.arange(start, start + WINDOW)
            np.testing.assert_array_equal(np.isnan(x[w]), np.isnan(rec["values"][rows]))  # tags not read: NaN
            np.testing.assert_allclose(x[w], rec["values"][rows], atol=1e-4, equal_nan=True)
            np.testing.assert_array_equal(s.y[w], rec["labels"][rows])
            # seconds since the chunk's first bin: 10 ms per bin index
            b = rec["bins"]
            np.testing.assert_allclose(s.t[w], 0.01 * (b[rows] - b[start]), rtol=1e-6, atol=1e-7)
    assert seen == {(n, st) for n, starts in EXPECTED_STARTS.items() for st in starts}


def test_several_readings_in_one_bin_are_one_step(tmp_path, served):
    """A01 bin 1: the same tag twice (z 10 and 20 -> 15) and the belt (z -5); label falling (1)."""
    _, ds = run(tmp_path, served)
    for split in ("train", "val", "test"):
        x = raw_x(ds, split)
        for w in range(len(x)):
            if chunk_id(x[w]) == ("A01", 0):
                step = x[w, 1]
                np.testing.assert_allclose(step[3:6], [0.0, 1.0, 15.0], atol=1e-4)  # right ankle, averaged
                np.testing.assert_allclose(step[9:12], [0.0, 1.0, -5.0], atol=1e-4)  # belt
                assert np.isnan(step[[0, 1, 2, 6, 7, 8]]).all()
                assert ds.splits[split].y[w, 1] == MERGE["falling"]
                assert ds.splits[split].t[w, 1] == pytest.approx(0.01 * served.truth["A01"]["bins"][1])
                return
    pytest.fail("no chunk starts at A01 bin 0")


def test_all_eleven_activities_merge_to_rubanovas_seven(tmp_path, served):
    meta, ds = run(tmp_path, served)
    labels = np.concatenate([ds.splits[k].y.ravel() for k in ("train", "val", "test")])
    assert set(labels.tolist()) == set(range(7))
    # The file's "standing up from sitting on the ground" is class 4, as Rubanova's label_dict intends.
    assert meta.classes[MERGE["standing up from sitting on the ground"]] == "standing up"


def test_split_follows_rubanovas_train_test_split(tmp_path, served):
    meta, ds = run(tmp_path, served)
    order = [(n, st) for n, starts in EXPECTED_STARTS.items() for st in starts]  # file order
    n = len(order)
    # sklearn's train_test_split(train_size=0.8, random_state=42, shuffle=True): a ShuffleSplit
    # whose permutation puts the n - floor(0.8 n) test items first, then the train items.
    perm = np.random.RandomState(42).permutation(n)
    n_test = n - math.floor(0.8 * n)
    train = perm[n_test:]
    n_val = int(0.1 * len(train))
    expected = {"train": len(train) - n_val, "val": n_val, "test": n_test}
    assert meta.sizes == expected == {"train": 9, "val": 1, "test": 3}

    def ids(split):
        return {chunk_id(w) for w in raw_x(ds, split)}

    assert ids("test") == {order[i] for i in perm[:n_test]}
    assert ids("val") == {order[i] for i in train[:n_val]}
    assert ids("train") == {order[i] for i in train[n_val:]}

    rows = {k: {(rec, first + b) for rec, first in ids(k) for b in range(WINDOW)} for k in ("train", "val", "test")}
    shared = {k: 100 * len(rows[k] & rows["train"]) / len(rows[k]) for k in ("test", "val")}  # review N7
    assert meta.provenance == (f"overlapping windows: {shared['test']:.1f} % of test rows and {shared['val']:.1f} % "
                               f"of validation rows also lie in a training window (the papers' protocol)")


def test_train_statistics_standardise_the_observed_values(tmp_path, served):
    _, ds = run(tmp_path, served)
    train = ds.splits["train"].x.reshape(-1, 12).astype(np.float64)
    np.testing.assert_allclose(np.nanmean(train, 0), 0.0, atol=1e-4)
    np.testing.assert_allclose(np.nanstd(train, 0), 1.0, atol=1e-3)


def test_window_and_stride_change_the_chunks(tmp_path, served):
    meta, ds = run(tmp_path, served, window=20, val_fraction=0.2)  # stride defaults to 20 // 2
    expected = sum(len(range(0, n - 20, 10)) for n in RECORDINGS.values())
    assert sum(meta.sizes.values()) == expected
    assert all(s.x.shape[1:] == (20, 12) for s in ds.splits.values())


def test_too_few_chunks_is_a_data_error(tmp_path, http_server):
    lines, _ = person_lines()
    write_person(http_server.root, [s for s in lines if s.startswith("B01")])  # 2 chunks only
    with pytest.raises(DataError, match="2 chunks of 50 bins"):
        run(tmp_path, http_server)


def test_unknown_activity_names_its_line(tmp_path, http_server):
    lines, _ = person_lines()
    lines.insert(10, line("A01", 0, T0 + 5, (0.0, 0.0, 0.0), "dancing"))
    write_person(http_server.root, lines)
    with pytest.raises(DataError, match=r"line 11: unknown activity 'dancing'"):
        run(tmp_path, http_server)


def test_variant_defaults_and_overrides():
    odelstm = PersonActivityParams(kind="person_activity")
    assert (odelstm.variant, odelstm.window, odelstm.stride, odelstm.seed) == ("odelstm", 32, 16, 98841)
    rubanova = PersonActivityParams(kind="person_activity", variant="rubanova")
    assert (rubanova.window, rubanova.stride, rubanova.seed, rubanova.val_fraction) == (50, 25, 42, 0.1)
    assert PersonActivityParams(kind="person_activity", variant="rubanova", window=40).stride == 20
    given = PersonActivityParams(kind="person_activity", variant="rubanova", window=40, stride=7, seed=3)
    assert (given.window, given.stride, given.seed) == (40, 7, 3)
    # odelstm keeps its fixed defaults whatever the window (unchanged behaviour)
    assert PersonActivityParams(kind="person_activity", window=64).stride == 16
    with pytest.raises(ValidationError, match="'odelstm' or 'rubanova'"):
        PersonActivityParams(kind="person_activity", variant="latent_ode")


@pytest.mark.parametrize(("key", "value", "fragments"), [
    ("variant", "latent_ode", ["prepare.person_activity_rubanova.variant", "'odelstm' or 'rubanova'"]),
    ("variant", True, ["prepare.person_activity_rubanova.variant", "'odelstm' or 'rubanova'"]),
    ("window", 1, ["prepare.person_activity_rubanova.window", "greater than or equal to 2"]),
])
def test_bad_values_in_params_yaml_are_one_line(tmp_path, key, value, fragments):
    raw = default_params()
    raw["prepare"]["person_activity_rubanova"] = {"kind": "person_activity", "variant": "rubanova", key: value}
    path = write_params(tmp_path, raw)
    with pytest.raises(ConfigError) as err:
        load_params(path)
    message = str(err.value)
    assert "\n" not in message and str(path) in message
    for fragment in fragments:
        assert fragment in message, (fragment, message)


def test_the_yaml_section_for_the_lead_loads(tmp_path):
    raw = default_params()
    raw["prepare"]["person_activity_rubanova"] = {"kind": "person_activity", "variant": "rubanova"}
    p = load_params(write_params(tmp_path, raw)).prepare["person_activity_rubanova"]
    assert (p.variant, p.window, p.stride, p.seed) == ("rubanova", 50, 25, 42)


def test_a_temporal_weights_family_trains_on_the_chunks(tmp_path, served):
    """One epoch of latent_ode_tw on 12 channels with missing tags (NaN) and 7 classes per step."""
    from pipeline.training.loop import Trainer, TrainSettings
    from tests.test_models import SMALL

    _, ds = run(tmp_path, served, val_fraction=0.3)
    trainer = Trainer("latent_ode_tw", SMALL["latent_ode_tw"], TrainSettings(lr=1e-2, batch_size=8), ds, seed=0)
    assert np.isfinite(trainer.run_epoch()["train_loss"])
    assert 0.0 <= trainer.evaluate("val") <= 1.0
