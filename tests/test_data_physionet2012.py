"""PhysioNet/CinC 2012 prepare: synthetic stays in the real set-a format (tar.gz of
set-a/<RecordID>.txt, Outcomes-a.txt), served over HTTP and prepared through the real path."""

from __future__ import annotations

import hashlib
import io
import tarfile
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from pipeline.config import Physionet2012Params
from pipeline.data.kinds import physionet2012 as p12
from pipeline.data.prepare import prepare
from pipeline.errors import DataError
from tests.conftest import prepare_served

OUTCOMES_HEADER = "RecordID,SAPS-I,SOFA,Length_of_stay,Survival,In-hospital_death"


def record(rid: int, age: float, lines: list[str], gender=1, height=-1, icu=4, weight=-1) -> bytes:
    head = ["Time,Parameter,Value", f"00:00,RecordID,{rid}", f"00:00,Age,{age:g}", f"00:00,Gender,{gender}",
            f"00:00,Height,{height}", f"00:00,ICUType,{icu}", f"00:00,Weight,{weight}"]
    return ("\n".join(head + lines) + "\n").encode()


# Hand-made stays, told apart by Age.
SPECIAL = {
    132539: (0, record(132539, 54, [
        "00:00,MechVent,1",      # step 0, with the descriptors
        "00:07,HR,80",           # 0.1167 h -> bin 7 -> 0.112
        "00:07,HR,90",           #   same step: HR averaged to 85
        "00:07,GCS,15",
        "00:08,HR,70",           # 0.1333 h -> bin 8 -> 0.128: a step of its own
        "01:30,Weight,80.5",     # a Weight measurement (time series), 1.5 h -> bin 94 -> 1.504
        "47:59,Temp,37",         # 47.983 h -> bin 2999 -> 47.984
        "48:00,Temp,38",         # 48 h: kept
        "49:00,HR,100",          # after 48 h: dropped
    ], height=-1, weight=-1)),
    132540: (1, record(132540, 66, ["00:30,HR,100", "01:00,Urine,250"], gender=0, height=170.2, icu=2,
                       weight=70.5)),
    132541: (0, record(132541, 77, [])),  # descriptors only: one step at time 0
}


def filler(count: int) -> dict[int, tuple[int, bytes]]:
    out = {}
    for k in range(count):
        lines = [f"{h:02d}:{(7 * k) % 60:02d},HR,{70 + k + h}" for h in range(1, 2 + k % 5)]
        lines.append(f"03:{k:02d},Glucose,{100 + k}")
        out[140000 + k] = (k % 2, record(140000 + k, 20 + k, lines))
    return out


def write_fixture(root: Path, stays: dict[int, tuple[int, bytes]], outcomes: dict[int, str] | None = None,
                  letter: str = "a", listed: dict[int, tuple[int, bytes]] | None = None) -> None:
    """set-<letter>.tar.gz of `stays` and Outcomes-<letter>.txt of `listed` (default: the same stays),
    with the mirror's SHA256SUMS.txt, as PhysioNet serves them."""
    with tarfile.open(root / f"set-{letter}.tar.gz", "w:gz") as tar:
        for rid, (_, data) in stays.items():
            info = tarfile.TarInfo(f"set-{letter}/{rid}.txt")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    rows = [OUTCOMES_HEADER]
    for rid, (label, _) in (stays if listed is None else listed).items():
        died = outcomes.get(rid, str(label)) if outcomes else str(label)
        rows.append(f"{rid},6,1,5,-1,{died}")
    (root / f"Outcomes-{letter}.txt").write_text("\n".join(rows) + "\n")
    write_sums(root)


def write_sums(root: Path) -> None:
    """The publisher's checksum list of the fixture files, as PhysioNet's SHA256SUMS.txt lists them."""
    files = sorted([*root.glob("set-*.tar.gz"), *root.glob("Outcomes-*.txt")])
    (root / "SHA256SUMS.txt").write_text("".join(f"{hashlib.sha256(f.read_bytes()).hexdigest()} {f.name}\n"
                                                 for f in files))


@pytest.fixture
def served(http_server):
    write_fixture(http_server.root, {**SPECIAL, **filler(22)})
    return http_server


def run(tmp_path: Path, server, **params):
    return prepare_served(tmp_path, server, "physionet2012", Physionet2012Params(kind="physionet2012", **params))


def stay(ds, age: float):
    """One stay's observed steps, de-standardised: x (S, C), t (S,), y."""
    mean, std = np.asarray(ds.meta.norm_mean), np.asarray(ds.meta.norm_std)
    age_channel = ds.meta.channels.index("Age")
    found = []
    for split in ds.splits.values():
        x = split.x * std + mean
        for i in np.flatnonzero(np.isclose(x[:, 0, age_channel], age, atol=1e-3)):
            found.append((x[i][split.mask[i]], split.t[i][split.mask[i]], split.y[i]))
    assert len(found) == 1, f"age {age}: {len(found)} stays"
    return found[0]


def test_raw_files_are_the_reference_addresses():
    files = p12.raw_files(Physionet2012Params(kind="physionet2012"))
    assert [(f.url, f.filename) for f in files] == [
        ("https://physionet.org/files/challenge-2012/1.0.0/set-a.tar.gz?download", "set-a.tar.gz"),
        ("https://physionet.org/files/challenge-2012/1.0.0/Outcomes-a.txt", "Outcomes-a.txt"),
    ]


def test_channels_are_the_reference_parameters():
    assert len(p12.PARAMS) == 41 and len(p12.TIME_SERIES) == 37
    assert p12.TIME_SERIES[0] == "Weight" and "Age" not in p12.TIME_SERIES and "ICUType" not in p12.TIME_SERIES


def test_prepare_merges_quantises_truncates_and_appends_statics(tmp_path, served):
    meta, ds = run(tmp_path, served)
    assert (meta.task, meta.metric, meta.output_size, meta.per_step) == ("binary", "auroc", 1, False)
    assert meta.channels == p12.TIME_SERIES + ["Age", "Gender", "Height", "ICUType", "Weight_admission"]
    assert meta.static_channels == meta.channels[-5:]
    assert meta.classes == ["survived", "died"]
    # 25 stays, 70/15/15 as sklearn rounds: test ceil(3.75) = 4, val ceil(21 * 0.15 / 0.85) = 4
    assert meta.sizes == {"train": 17, "val": 4, "test": 4}
    for split in ds.splits.values():
        assert split.x.shape[1:] == (7, 42) and split.x.dtype == np.float32
        assert set(split.y.tolist()) == {0, 1}

    col = meta.channels.index
    x, t, y = stay(ds, 54)
    assert y == 0
    np.testing.assert_allclose(t, [0.0, 0.112, 0.128, 1.504, 47.984, 48.0], atol=1e-5)
    np.testing.assert_allclose(x[:, col("HR")], [np.nan, 85.0, 70.0, np.nan, np.nan, np.nan], rtol=1e-5)
    np.testing.assert_allclose(x[:, col("GCS")], [np.nan, 15.0, np.nan, np.nan, np.nan, np.nan], rtol=1e-5)
    np.testing.assert_allclose(x[:, col("MechVent")], [1.0] + [np.nan] * 5, rtol=1e-5)
    np.testing.assert_allclose(x[:, col("Weight")], [np.nan] * 3 + [80.5, np.nan, np.nan], rtol=1e-5)
    np.testing.assert_allclose(x[:, col("Temp")], [np.nan] * 4 + [37.0, 38.0], rtol=1e-5)
    assert np.isnan(x[:, col("Albumin")]).all()
    # statics at every step; the -1 descriptors (Height, Weight) are missing
    statics = x[:, -5:]
    np.testing.assert_allclose(statics[:, [0, 1, 3]], np.tile([54.0, 1.0, 4.0], (6, 1)), atol=1e-4)
    assert np.isnan(statics[:, [2, 4]]).all()

    x, t, y = stay(ds, 66)
    assert y == 1
    np.testing.assert_allclose(t, [0.0, 0.496, 0.992], atol=1e-5)  # 0.5 h -> bin 31; 1 h -> bin 62
    np.testing.assert_allclose(x[0, -5:], [66.0, 0.0, 170.2, 2.0, 70.5], rtol=1e-5, atol=1e-4)
    assert np.isnan(x[:, col("Weight")]).all(), "the descriptor Weight is static only"

    x, t, y = stay(ds, 77)  # descriptors only: one step at time 0
    np.testing.assert_array_equal(t, [0.0])
    assert np.isnan(x[0, :37]).all() and x[0, -5] == pytest.approx(77.0, abs=1e-3)


def test_coarser_quantisation_merges_by_averaging(tmp_path, served):
    meta, ds = run(tmp_path, served, quantization=0.1)
    x, t, _ = stay(ds, 54)
    # 00:07 and 00:08 now both round to 0.1 h: HR (80 + 90 + 70) / 3
    np.testing.assert_allclose(t[:2], [0.0, 0.1], atol=1e-6)
    assert x[1, meta.channels.index("HR")] == pytest.approx(80.0, rel=1e-5)


def test_max_hours_truncates(tmp_path, served):
    _, ds = run(tmp_path, served, max_hours=24.0)
    x, t, _ = stay(ds, 54)
    np.testing.assert_allclose(t, [0.0, 0.112, 0.128, 1.504], atol=1e-5)


def _expect_error(tmp_path, server, match):
    out = tmp_path / "processed" / "physionet2012"
    with pytest.raises(DataError, match=match):
        prepare("physionet2012", Physionet2012Params(kind="physionet2012"), out_dir=out,
                raw_dir=tmp_path / "raw" / "physionet2012", lock_path=tmp_path / "raw.lock", source=server.url)
    assert not out.exists()
    assert not out.parent.exists() or not any(out.parent.iterdir()), "no temporary folder left"


@pytest.mark.parametrize("line, message", [
    ("00:07,HR", r"line 8: expected 'HH:MM,Parameter,Value', got '00:07,HR'"),
    ("7h05,HR,80", r"line 8: time '7h05' is not HH:MM"),
    ("01:75,HR,80", r"line 8: time '01:75' is not HH:MM"),
    ("01:05,HR,high", r"line 8: value 'high' is not a number"),
    ("01:05,HeartRate,80", r"line 8: unknown parameter 'HeartRate'"),
])
def test_malformed_line_names_file_and_line(tmp_path, http_server, line, message):
    stays = {**SPECIAL, **filler(22)}
    stays[140005] = (1, record(140005, 25, [line]))
    write_fixture(http_server.root, stays)
    _expect_error(tmp_path, http_server, r"set-a\.tar\.gz:set-a/140005\.txt: " + message)


def test_outcome_outside_0_1(tmp_path, http_server):
    write_fixture(http_server.root, {**SPECIAL, **filler(22)}, outcomes={140003: "2"})
    _expect_error(tmp_path, http_server, r"Outcomes-a\.txt: line 8: In-hospital_death '2' is not 0 or 1")


def test_record_without_outcome(tmp_path, http_server):
    write_fixture(http_server.root, {**SPECIAL, **filler(22)})
    outcomes = http_server.root / "Outcomes-a.txt"
    outcomes.write_text("\n".join(l for l in outcomes.read_text().splitlines() if not l.startswith("140007")) + "\n")
    write_sums(http_server.root)
    _expect_error(tmp_path, http_server, r"record 140007 has no line in .*Outcomes-a\.txt")


def test_corrupt_archive(tmp_path, served):
    data = (served.root / "set-a.tar.gz").read_bytes()
    (served.root / "set-a.tar.gz").write_bytes(data[: len(data) // 2])
    write_sums(served.root)  # the mirror's list vouches for the broken file: the archive check catches it
    _expect_error(tmp_path, served, r"set-a\.tar\.gz")


def test_corrupt_archive_in_build(tmp_path):
    # build itself, past the download's check: a gzip stream cut short.
    raw = tmp_path / "raw"
    raw.mkdir()
    write_fixture(raw, {**SPECIAL, **filler(22)})
    data = (raw / "set-a.tar.gz").read_bytes()
    (raw / "set-a.tar.gz").write_bytes(data[: len(data) - 40])
    with pytest.raises(DataError, match=r"set-a\.tar\.gz: not a readable tar\.gz archive"):
        p12.build("physionet2012", Physionet2012Params(kind="physionet2012"), raw)


# ------------------------------------------------------------------ sets b and c (issue 30, N6)


def other_set(base: int, count: int) -> dict[int, tuple[int, bytes]]:
    """`count` stays of another set, record IDs from `base` (unique across sets, as the challenge's)."""
    return {base + k: (k % 2, record(base + k, 30 + k, [f"01:{k:02d},HR,{80 + k}", "02:00,Glucose,110"]))
            for k in range(count)}


def test_raw_files_of_every_listed_set():
    files = p12.raw_files(Physionet2012Params(kind="physionet2012", sets=["a", "b", "c"]))
    assert [f.filename for f in files] == ["set-a.tar.gz", "Outcomes-a.txt", "set-b.tar.gz", "Outcomes-b.txt",
                                           "set-c.tar.gz", "Outcomes-c.txt"]
    assert files[2].url == "https://physionet.org/files/challenge-2012/1.0.0/set-b.tar.gz?download"
    assert {f.checksums_url for f in files} == {"https://physionet.org/files/challenge-2012/1.0.0/SHA256SUMS.txt"}
    assert Physionet2012Params(kind="physionet2012").sets == ["a"]  # the CfC paper's set by default


def test_sets_b_and_c_are_fetched_and_pooled(tmp_path, http_server):
    write_fixture(http_server.root, {**SPECIAL, **filler(22)})
    write_fixture(http_server.root, other_set(150000, 10), letter="b")
    write_fixture(http_server.root, other_set(160000, 5), letter="c")
    meta, ds = run(tmp_path, http_server, sets=["a", "b", "c"])
    assert sum(meta.sizes.values()) == 40 and meta.provenance == ""
    assert "set-a, set-b, set-c with Outcomes-a, Outcomes-b, Outcomes-c" in meta.source
    assert sorted(p.name for p in (tmp_path / "raw" / "physionet2012").iterdir()) == [
        "Outcomes-a.txt", "Outcomes-b.txt", "Outcomes-c.txt", "set-a.tar.gz", "set-b.tar.gz", "set-c.tar.gz"]
    meta_a, _ = run(tmp_path / "only-a", http_server)  # the other sets in the mirror are not read
    assert sum(meta_a.sizes.values()) == 25 and "set-b" not in meta_a.source


def test_a_record_id_in_two_sets_is_an_error(tmp_path):
    raw = tmp_path / "raw"
    raw.mkdir()
    write_fixture(raw, {**SPECIAL, **filler(22)})
    write_fixture(raw, {**other_set(150000, 4), 140003: filler(22)[140003]}, letter="b")
    with pytest.raises(DataError, match=r"set-b\.tar\.gz: record 140003 appears twice \(also in set-a\.tar\.gz\)"):
        p12.build("physionet2012", Physionet2012Params(kind="physionet2012", sets=["a", "b"]), raw)


def test_a_listed_set_missing_from_the_raw_folder_is_named(tmp_path):
    raw = tmp_path / "raw"
    raw.mkdir()
    write_fixture(raw, {**SPECIAL, **filler(22)})
    write_fixture(raw, other_set(150000, 4), letter="b")
    (raw / "Outcomes-b.txt").unlink()
    with pytest.raises(DataError, match=r"Outcomes-b\.txt: no such file; prepare\.physionet2012\.sets lists 'b'"):
        p12.build("physionet2012", Physionet2012Params(kind="physionet2012", sets=["a", "b"]), raw)


def test_completeness_counts_the_records_read_against_the_outcomes(tmp_path):
    raw = tmp_path / "raw"
    raw.mkdir()
    stays, b = {**SPECIAL, **filler(22)}, other_set(150000, 10)
    write_fixture(raw, stays)
    write_fixture(raw, {k: v for k, v in b.items() if k not in (150001, 150004)}, letter="b", listed=b)
    ds = p12.build("physionet2012", Physionet2012Params(kind="physionet2012", sets=["a", "b"]), raw)
    assert ds.meta.provenance == "33 of 35 records (set-b: 8 of 10)"
    assert p12.completeness({"a": (3996, 4000)}) == "3,996 of 4,000 records"
    assert p12.completeness({"a": (4000, 4000), "b": (4000, 4000)}) == ""


@pytest.mark.parametrize("sets, message", [
    (["a", "a"], r"key `prepare\.physionet2012\.sets`: lists \['a'\] more than once; allowed: each of "
                 r"\['a', 'b', 'c'\] at most once"),
    (["a", "d"], r"key `prepare\.physionet2012\.sets\.1`: Input should be 'a', 'b' or 'c'"),
    ([], r"key `prepare\.physionet2012\.sets`: List should have at least 1 item"),
])
def test_sets_option_is_checked_in_one_line(tmp_path, sets, message):
    from pipeline.config.params import params_from
    from pipeline.errors import ConfigError
    from tests.conftest import default_params

    params = default_params()
    params["prepare"]["physionet2012"]["sets"] = sets
    with pytest.raises(ConfigError, match=message) as err:
        params_from(params, tmp_path / "params.yaml")
    assert "\n" not in str(err.value)


def test_min_max_scaling_is_the_reference_s_formula_with_training_statistics(tmp_path):
    """`scaling: min_max`: (x - min) / max per channel (raminmh/CfC duv_physionet.py), min and max
    over the observed training values only; meta's norm_mean / norm_std undo it like a standardisation."""
    raw = tmp_path / "raw"
    raw.mkdir()
    write_fixture(raw, {**SPECIAL, **filler(22)})
    standard = p12.build("physionet2012", Physionet2012Params(kind="physionet2012"), raw)
    scaled = p12.build("physionet2012", Physionet2012Params(kind="physionet2012", scaling="min_max"), raw)
    hr = p12.TIME_SERIES.index("HR")
    mean, std = np.asarray(standard.meta.norm_mean), np.asarray(standard.meta.norm_std)
    low, high = np.asarray(scaled.meta.norm_mean), np.asarray(scaled.meta.norm_std)
    for name in ("train", "val", "test"):
        original = standard.splits[name].x * std + mean  # the same stays and split in original units
        np.testing.assert_allclose(scaled.splits[name].x, (original - low) / high, rtol=1e-5, atol=1e-5)
        np.testing.assert_array_equal(np.isnan(scaled.splits[name].x), np.isnan(standard.splits[name].x))
    train = standard.splits["train"]
    hr_train = (train.x * std + mean)[..., hr][train.mask]
    assert low[hr] == pytest.approx(np.nanmin(hr_train)) and high[hr] == pytest.approx(np.nanmax(hr_train))
    observed = scaled.splits["train"].x[..., hr][scaled.splits["train"].mask]
    assert np.nanmin(observed) == pytest.approx(0.0, abs=1e-6) and np.nanmax(observed) <= 1.0 + 1e-6
    never = ~np.isfinite(np.nanmax(np.where(train.mask[..., None], train.x, np.nan), axis=(0, 1)))
    assert (low[never] == 0).all() and (high[never] == 1).all()  # a channel never seen in train: left as it is


def test_descriptor_lines_the_challenge_never_omits_or_repeats_are_named_in_the_provenance(tmp_path):
    """The copy in ../shared/data has no ICUType line and up to four different Age lines in 381 records;
    the challenge's own files give every descriptor once. The first value is kept and the copy is
    described in meta.json's provenance (and from there in the report, the runs' tags, the model)."""
    raw = tmp_path / "raw"
    raw.mkdir()
    stays = {**SPECIAL, **filler(22)}
    for rid in list(stays)[:3]:  # Age given twice (a different value first) in 3 records
        label, data = stays[rid]
        text = data.decode().replace("00:00,Age,", "00:00,Age,99\n00:00,Age,", 1)
        stays[rid] = (label, text.encode())
    stays = {rid: (label, b"\n".join(l for l in data.split(b"\n") if b",ICUType," not in l))
             for rid, (label, data) in stays.items()}
    write_fixture(raw, stays)
    ds = p12.build("physionet2012", Physionet2012Params(kind="physionet2012"), raw)
    assert ds.meta.provenance == ("Age given twice or more with different values in 3 records (the first kept); "
                                  "ICUType absent from every record")
    age = ds.meta.channels.index("Age")
    ages = {round(float(v), 3) for s in ds.splits.values() for v in s.x[:, 0, age]}
    mean, std = ds.meta.norm_mean[age], ds.meta.norm_std[age]
    assert round(99 - mean, 1) in {round(a * std, 1) for a in ages}  # the first line's value is the one kept
    icu = ds.meta.channels.index("ICUType")
    assert all(np.isnan(s.x[..., icu]).all() for s in ds.splits.values())
    assert p12.descriptor_notes(Counter({"absent Height": 2}), 10) == "Height absent from 2 records"
    clean = p12.build("physionet2012", Physionet2012Params(kind="physionet2012"), _clean(tmp_path))
    assert clean.meta.provenance == ""


def _clean(tmp_path):
    raw = tmp_path / "clean"
    raw.mkdir()
    write_fixture(raw, {**SPECIAL, **filler(22)})
    return raw
