"""Sepsis (PhysioNet/CinC 2019) prepare: synthetic stays in the real .psv format, zipped as the
two training sets, served over HTTP and prepared through the real path."""

from __future__ import annotations

import zipfile
from pathlib import Path

import numpy as np
import pytest

from pipeline.config import SepsisParams
from pipeline.data.kinds import sepsis
from pipeline.data.prepare import prepare
from pipeline.errors import DataError
from tests.conftest import prepare_served

NAN = float("nan")
HEADER = "|".join(sepsis.COLUMNS)


def psv(iculos, label=None, age=60.0, gender=1.0, unit1=1.0, unit2=0.0, hosp=-5.0, values=None) -> bytes:
    """A .psv file: one row per ICULOS; `values` maps a time-varying column to a list per row."""
    n = len(iculos)
    label = [0] * n if label is None else label
    cols = {c: [NAN] * n for c in sepsis.TIME_VARYING}
    cols["HR"] = [80.0 + i for i in range(n)]  # observed every hour unless overridden
    cols.update(values or {})
    lines = [HEADER]
    for i in range(n):
        row = [cols[c][i] for c in sepsis.TIME_VARYING] + [age, gender, unit1, unit2, hosp, iculos[i], label[i]]
        lines.append("|".join("NaN" if isinstance(v, float) and np.isnan(v) else f"{v:g}" for v in row))
    return ("\n".join(lines) + "\n").encode()


def write_zip(path: Path, folder: str, files: dict[str, bytes], method=zipfile.ZIP_DEFLATED) -> None:
    with zipfile.ZipFile(path, "w", method) as z:
        for name, data in files.items():
            z.writestr(f"{folder}/{name}", data)


# Hand-made stays, told apart by Age.
SPECIAL = {
    # 80 hours; sepsis only after hour 72: truncated to 72 rows and labelled 0 (the reference's
    # label is over the rows it keeps).
    "p000001.psv": psv(list(range(1, 81)), label=[0] * 74 + [1] * 6, age=91.0),
    # 5 hours, sepsis at the end; HR observed at hours 1 and 3, O2Sat never, Temp at 2, 4, 5.
    "p000002.psv": psv([1, 2, 3, 4, 5], label=[0, 0, 0, 1, 1], age=92.0, unit1=NAN, unit2=NAN, hosp=NAN,
                       values={"HR": [80.0, NAN, 82.0, NAN, NAN], "Temp": [NAN, 37.0, NAN, 38.5, 39.0]}),
    # 2 hours only: the reference's grid has 2 rows -> dropped.
    "p000003.psv": psv([1, 2], age=93.0),
    # Starts at hour 5: the grid (hours 1..6) has 6 rows -> kept, with two steps at t = 5, 6.
    "p000004.psv": psv([5, 6], label=[1, 1], age=94.0),
    # Admitted to the stay at hour 73: nothing within 72 hours -> dropped.
    "p000005.psv": psv([73, 74, 75], age=95.0),
}
N_KEPT_SPECIAL = 3


def filler(first_id: int, count: int, age0: float) -> dict[str, bytes]:
    """Ordinary stays of 3-10 hours, every other one septic."""
    out = {}
    for k in range(count):
        n = 3 + k % 8
        out[f"p{first_id + k:06d}.psv"] = psv(list(range(1, n + 1)), label=[0] * (n - 1) + [k % 2], age=age0 + k)
    return out


@pytest.fixture
def served(http_server):
    set_a = {**SPECIAL, **filler(10, 12, 20.0)}
    set_b = filler(100001, 12, 40.0)
    write_zip(http_server.root / "training_setA.zip", "training", set_a)
    write_zip(http_server.root / "training_setB.zip", "training_setB", set_b)
    return http_server


def run(tmp_path: Path, server, **params):
    return prepare_served(tmp_path, server, "sepsis", SepsisParams(kind="sepsis", **params))


def pooled(ds):
    """All splits together, de-standardised: x, t, mask, y."""
    mean, std = np.asarray(ds.meta.norm_mean), np.asarray(ds.meta.norm_std)
    parts = [ds.splits[k] for k in ("train", "val", "test")]
    x = np.concatenate([s.x for s in parts]) * std + mean
    return (x, np.concatenate([s.t for s in parts]), np.concatenate([s.mask for s in parts]),
            np.concatenate([s.y for s in parts]))


def stay(ds, age: float):
    x, t, mask, y = pooled(ds)
    age_channel = ds.meta.channels.index("Age")
    rows = np.flatnonzero(np.isclose(x[:, 0, age_channel], age, atol=1e-3))
    assert len(rows) == 1, f"age {age}: {len(rows)} stays"
    i = rows[0]
    return x[i][mask[i]], t[i][mask[i]], y[i], t[i]


def test_raw_files_are_the_reference_zips():
    files = sepsis.raw_files(SepsisParams(kind="sepsis"))
    assert [f.url for f in files] == [
        "https://archive.physionet.org/users/shared/challenge-2019/training_setA.zip",
        "https://archive.physionet.org/users/shared/challenge-2019/training_setB.zip",
    ]
    assert [f.filename for f in files] == ["training_setA.zip", "training_setB.zip"]


def test_prepare_truncates_keeps_nan_and_appends_statics(tmp_path, served):
    meta, ds = run(tmp_path, served)
    assert (meta.task, meta.metric, meta.output_size, meta.per_step) == ("binary", "auroc", 1, False)
    assert meta.channels == sepsis.TIME_VARYING + sepsis.STATIC
    assert meta.static_channels == ["Age", "Gender", "Unit1", "Unit2", "HospAdmTime"]
    assert meta.channels[-5:] == meta.static_channels and len(meta.channels) == 39

    n = N_KEPT_SPECIAL + 24
    assert sum(meta.sizes.values()) == n
    # 70/15/15: sklearn takes ceil(0.15 * 27) = 5 for test, then ceil(22 * 0.15 / 0.85) = 4 for val
    assert meta.sizes == {"train": 18, "val": 4, "test": 5}
    for split in ds.splits.values():
        assert split.x.shape[1:] == (72, 39) and split.x.dtype == np.float32
        assert set(split.y.tolist()) == {0, 1}, "stratified: both classes in every split"

    # 80 hours -> the first 72; sepsis only after hour 72 -> label 0.
    x, t, y, t_padded = stay(ds, 91.0)
    assert len(x) == 72 and y == 0
    np.testing.assert_array_equal(t, np.arange(1, 73, dtype=np.float32))
    np.testing.assert_allclose(x[:, 0], 80.0 + np.arange(72), rtol=1e-5)  # HR
    assert np.isnan(x[:, 1]).all()  # O2Sat never observed: NaN kept

    x, t, y, t_padded = stay(ds, 92.0)
    assert y == 1 and len(x) == 5
    hr, temp = x[:, 0], x[:, sepsis.TIME_VARYING.index("Temp")]
    np.testing.assert_array_equal(np.isnan(hr), [False, True, False, True, True])
    np.testing.assert_allclose(temp[[1, 3, 4]], [37.0, 38.5, 39.0], rtol=1e-5)
    assert (t_padded[5:] == 5).all(), "padding repeats the last time"
    # statics at every step; missing Unit1, Unit2, HospAdmTime -> 0 as in the reference
    np.testing.assert_allclose(x[:, -5:], np.tile([92.0, 1.0, 0.0, 0.0, 0.0], (5, 1)), atol=1e-4)

    # Starts at hour 5: kept (the reference's grid from hour 1 has 6 rows), times are ICULOS.
    x, t, y, _ = stay(ds, 94.0)
    np.testing.assert_array_equal(t, [5.0, 6.0])
    assert y == 1

    # Dropped: two hours only, and a stay that begins after hour 72.
    for age in (93.0, 95.0):
        x_all = pooled(ds)[0]
        assert not np.isclose(x_all[:, 0, meta.channels.index("Age")], age, atol=1e-3).any()

    # Standardised with train statistics: observed train HR has mean 0.
    train = ds.splits["train"]
    assert abs(np.nanmean(train.x[train.mask][:, 0])) < 1e-4


def test_intensity_adds_cumulative_counts_by_hand(tmp_path, served):
    meta, ds = run(tmp_path, served, intensity=True)
    counts = [f"{c}_count" for c in sepsis.TIME_VARYING]
    statics = sepsis.STATIC + ["Unit1_observed", "Unit2_observed"]
    assert meta.channels == sepsis.TIME_VARYING + counts + statics
    assert meta.static_channels == statics and len(meta.channels) == 34 * 2 + 7

    x, t, y, _ = stay(ds, 92.0)
    col = meta.channels.index
    np.testing.assert_allclose(x[:, col("HR_count")], [1, 1, 2, 2, 2], atol=1e-4)
    np.testing.assert_allclose(x[:, col("Temp_count")], [0, 1, 1, 2, 3], atol=1e-4)
    np.testing.assert_allclose(x[:, col("O2Sat_count")], [0, 0, 0, 0, 0], atol=1e-4)
    np.testing.assert_allclose(x[:, col("Unit1_observed")], 0.0, atol=1e-4)
    x, *_ = stay(ds, 91.0)
    np.testing.assert_allclose(x[:, col("HR_count")], np.arange(1, 73), rtol=1e-4)
    np.testing.assert_allclose(x[:, [col("Unit1_observed"), col("Unit2_observed")]], 1.0, atol=1e-4)


def test_split_is_seeded(tmp_path, served):
    _, a = run(tmp_path / "a", served, seed=3)
    _, b = run(tmp_path / "b", served, seed=3)
    _, c = run(tmp_path / "c", served, seed=4)
    age = a.meta.channels.index("Age")
    ages = lambda ds: sorted(ds.splits["test"].x[:, 0, age].tolist())  # noqa: E731
    assert ages(a) == ages(b) and ages(a) != ages(c)


def _expect_error(tmp_path, server, match):
    out = tmp_path / "processed" / "sepsis"
    with pytest.raises(DataError, match=match):
        prepare("sepsis", SepsisParams(kind="sepsis"), out_dir=out, raw_dir=tmp_path / "raw" / "sepsis",
                lock_path=tmp_path / "raw.lock", source=server.url)
    assert not out.exists()
    assert not out.parent.exists() or not any(out.parent.iterdir()), "no temporary folder left"


def test_missing_column_names_file_and_column(tmp_path, served):
    bad = psv([1, 2, 3]).replace(b"|Lactate|", b"|", 1)
    write_zip(served.root / "training_setB.zip", "training_setB", {**filler(100001, 12, 40.0), "p100050.psv": bad})
    _expect_error(tmp_path, served, r"training_setB/p100050\.psv.*missing columns \['Lactate'\]")


def test_label_outside_0_1(tmp_path, served):
    bad = psv([1, 2, 3], label=[0, 2, 1])
    write_zip(served.root / "training_setB.zip", "training_setB", {**filler(100001, 12, 40.0), "p100050.psv": bad})
    _expect_error(tmp_path, served, r"p100050\.psv: line 3: SepsisLabel 2 is not 0 or 1")


def test_non_numeric_cell(tmp_path, served):
    bad = psv([1, 2, 3]).replace(b"\n81|", b"\nabc|", 1)
    write_zip(served.root / "training_setB.zip", "training_setB", {**filler(100001, 12, 40.0), "p100050.psv": bad})
    _expect_error(tmp_path, served, r"p100050\.psv: line 3: HR = 'abc' is not a number")


def test_corrupt_zip(tmp_path, served):
    # Through prepare: the download's integrity check refuses it, nothing is written.
    data = (served.root / "training_setA.zip").read_bytes()
    (served.root / "training_setA.zip").write_bytes(data[: len(data) // 2])
    _expect_error(tmp_path, served, "training_setA.zip")


def test_corrupt_member_in_build(tmp_path):
    # build itself, on a zip whose member fails its CRC (stored, one byte changed).
    raw = tmp_path / "raw"
    raw.mkdir()
    write_zip(raw / "training_setA.zip", "training", filler(10, 12, 20.0), method=zipfile.ZIP_STORED)
    write_zip(raw / "training_setB.zip", "training_setB", filler(100001, 12, 40.0))
    data = bytearray((raw / "training_setA.zip").read_bytes())
    at = data.index(b"\n80|") + 1
    data[at] = ord("9")
    (raw / "training_setA.zip").write_bytes(bytes(data))
    with pytest.raises(DataError, match=r"training_setA\.zip: member training/p000010\.psv is corrupt"):
        sepsis.build("sepsis", SepsisParams(kind="sepsis"), raw)


def test_parse_psv_rejects_a_reordered_header():
    cols = sepsis.COLUMNS.copy()
    cols[0], cols[1] = cols[1], cols[0]
    data = psv([1, 2, 3]).replace(HEADER.encode(), "|".join(cols).encode())
    with pytest.raises(DataError, match="x.psv: header .*columns out of order"):
        sepsis.parse_psv("x.psv", data, 72)


def test_parse_psv_rejects_non_increasing_iculos():
    with pytest.raises(DataError, match=r"x.psv: line 4: ICULOS 2 does not increase"):
        sepsis.parse_psv("x.psv", psv([1, 2, 2]), 72)
