"""UEA archive datasets: aeon's bundled copies without a download, the archive's zips of .ts files
for the rest (served by a local HTTP server), the 70/15/15 resplit of EigenWorms and
CharacterTrajectories, dropped observations (Kidger et al. 2020), and the errors on bad input."""

from __future__ import annotations

import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch

from pipeline.config import PrecomputeSpec, UeaParams
from pipeline.data.kinds import uea
from pipeline.data.contract import Dataset, load_dataset
from pipeline.data.prepare import prepare
from pipeline.errors import ConfigError, DataError, DownloadError

# ------------------------------------------------------------------------------ fixture files


def ts_text(name: str, series: list[np.ndarray], labels: list[str], classes: list[str], *,
            equal_length: bool, missing: bool = False) -> str:
    """A .ts file in the archive's format; series are (C, L_i) arrays, NaN written as NaN."""
    lengths = {s.shape[1] for s in series}
    lines = [
        f"#Fixture in the format of the UEA archive's {name}.",
        f"@problemName {name}",
        "@timeStamps false",
        f"@missing {'true' if missing else 'false'}",
        "@univariate false",
        f"@dimensions {series[0].shape[0]}",
        f"@equalLength {'true' if equal_length else 'false'}",
    ]
    if equal_length:
        lines.append(f"@seriesLength {lengths.pop()}")
    lines += [f"@classLabel true {' '.join(classes)}", "@data"]
    for s, label in zip(series, labels):
        channels = [",".join("NaN" if np.isnan(v) else f"{v:.6f}" for v in row) for row in s]
        lines.append(":".join(channels) + f":{label}")
    return "\n".join(lines) + "\n"


def write_zip(root: Path, name: str, train: str, test: str | None, folder: bool = False) -> Path:
    """<name>.zip holding <name>_TRAIN.ts and <name>_TEST.ts, at the top level as the archive's
    aeon-toolkit zips have them (aeon extracts into <name>/ and reads <name>/<name>_TRAIN.ts)."""
    path = root / f"{name}.zip"
    prefix = f"{name}/" if folder else ""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr(f"{prefix}{name}_TRAIN.ts", train)
        if test is not None:
            z.writestr(f"{prefix}{name}_TEST.ts", test)
        z.writestr(f"{prefix}{name}.txt", "description")
    return path


def encoded_series(ids: list[int], lengths: list[int], channels: int) -> list[np.ndarray]:
    """(C, L) series whose channel 0 is the series id and channel c >= 1 is c * 1000 + step index,
    so every processed value can be traced back to its series and its original time."""
    out = []
    for i, length in zip(ids, lengths):
        s = np.empty((channels, length))
        s[0] = i
        for c in range(1, channels):
            s[c] = c * 1000 + np.arange(length)
        out.append(s)
    return out


def run_prepare(tmp_path: Path, server, name: str, p: UeaParams) -> Dataset:
    out = tmp_path / "processed" / name
    prepare(name, p, out_dir=out, raw_dir=tmp_path / "raw" / name, lock_path=tmp_path / "raw.lock",
            source=server.url)
    return load_dataset(out)


def raw_values(d: Dataset, split: str) -> np.ndarray:
    """Undo the standardisation: the values as in the .ts file (NaN kept)."""
    s = d.splits[split]
    return s.x * np.asarray(d.meta.norm_std, np.float32) + np.asarray(d.meta.norm_mean, np.float32)


# ------------------------------------------------------------------------------ archive zips

EW_CLASSES = ["1", "2", "3", "4", "5"]


def eigenworms_fixture(root: Path, length: int = 40, folder: bool = False) -> dict[int, str]:
    """A small 'EigenWorms': 5 classes x 8 train + 8 test series, 6 channels, equal length.
    Returns series id -> label."""
    train_ids, test_ids = list(range(40)), list(range(40, 80))
    label = {i: EW_CLASSES[i % 5] for i in range(80)}
    text = {
        split: ts_text("EigenWorms", encoded_series(ids, [length] * len(ids), 6), [label[i] for i in ids],
                       EW_CLASSES, equal_length=True)
        for split, ids in (("TRAIN", train_ids), ("TEST", test_ids))
    }
    write_zip(root, "EigenWorms", text["TRAIN"], text["TEST"], folder=folder)
    return label


@pytest.mark.parametrize("folder", [False, True])
def test_eigenworms_resplit_70_15_15_stratified(tmp_path, http_server, folder) -> None:
    label = eigenworms_fixture(http_server.root, folder=folder)
    p = UeaParams(kind="uea", name="EigenWorms", resplit=True, seed=0)
    assert uea.raw_files(p)[0].url == "https://timeseriesclassification.com/aeon-toolkit/EigenWorms.zip"
    d = run_prepare(tmp_path, http_server, "eigenworms", p)

    assert d.meta.sizes == {"train": 56, "val": 12, "test": 12}  # 70/15/15 of 80
    assert d.meta.classes == EW_CLASSES and d.meta.output_size == 5 and d.meta.channels == [f"c{i}" for i in range(6)]
    seen = []
    for name, split in d.splits.items():
        assert split.x.shape == (len(split), 40, 6) and split.mask.all()
        assert np.array_equal(split.t, np.broadcast_to(np.arange(40, dtype=np.float32), split.t.shape))
        # stratified: every class has its share (1/5) of every split, up to rounding
        assert np.abs(np.bincount(split.y, minlength=5) - len(split) / 5).max() < 1
        values = raw_values(d, name)
        ids = np.round(values[:, 0, 0]).astype(int)
        assert [EW_CLASSES[k] for k in split.y] == [label[i] for i in ids]  # labels follow their series
        assert np.allclose(values[:, :, 3], 3000 + np.arange(40), atol=0.05)  # channel order and times
        seen += ids.tolist()
    assert sorted(seen) == list(range(80))  # train and test pooled, each series once
    train = d.splits["train"]
    assert np.allclose(train.x.reshape(-1, 6)[:, 1:].mean(axis=0), 0, atol=1e-4)  # train statistics only
    # the lock file records the zip's checksum under its canonical URL
    assert "https://timeseriesclassification.com/aeon-toolkit/EigenWorms.zip" in (tmp_path / "raw.lock").read_text()


def test_precomputed_logsignatures_equal_the_nrde_inputs(tmp_path, http_server) -> None:
    from pipeline.data.inputs import input_key
    from pipeline.models import get_model_class

    eigenworms_fixture(http_server.root, length=23)  # 23 steps: the last window of 4 is partial
    specs = [PrecomputeSpec(family="nrde", args={"logsig_depth": depth, "logsig_step": 4}) for depth in (1, 2)]
    p = UeaParams(kind="uea", name="EigenWorms", resplit=True, seed=0, precompute=specs)
    d = run_prepare(tmp_path, http_server, "eigenworms", p)
    nrde = get_model_class("nrde")
    for spec in specs:
        folder = d.folder / "inputs" / input_key(nrde, spec.args)
        for name, split in d.splits.items():
            stored = torch.load(folder / f"{name}.pt", weights_only=True)
            x, t, mask = (torch.from_numpy(a) for a in (split.x, split.t, split.mask))
            expected = nrde.prepare_inputs(x, t, mask, **spec.args)
            assert stored.keys() == expected.keys()
            for key in expected:
                assert torch.equal(stored[key], expected[key]), (spec.args, name, key)
        windows = int(np.ceil((23 - 1) / 4))
        channels = 7 if spec.args["logsig_depth"] == 1 else 7 + 21
        assert stored["coeffs"].shape == (12, windows + 1, channels)


# CharacterTrajectories-like: 4 classes x (5 train + 5 test), 3 channels, lengths 10..32.
CT_CLASSES = ["1", "2", "3", "4"]
CT_LENGTHS = [10 + (7 * i) % 23 for i in range(40)]


def chartraj_fixture(root: Path, nan_padded: bool) -> dict[int, str]:
    label = {i: CT_CLASSES[i % 4] for i in range(40)}
    text = {}
    for split, ids in (("TRAIN", list(range(20))), ("TEST", list(range(20, 40)))):
        series = encoded_series(ids, [CT_LENGTHS[i] for i in ids], 3)
        if nan_padded:  # equal length, the tail of each shorter series NaN
            width = max(CT_LENGTHS)
            series = [np.pad(s, ((0, 0), (0, width - s.shape[1])), constant_values=np.nan) for s in series]
        text[split] = ts_text("CharacterTrajectories", series, [label[i] for i in ids], CT_CLASSES,
                              equal_length=nan_padded, missing=nan_padded)
    write_zip(root, "CharacterTrajectories", text["TRAIN"], text["TEST"])
    return label


@pytest.mark.parametrize("fraction", [0.3, 0.5, 0.7])
def test_character_trajectories_drops_observations(tmp_path, http_server, fraction) -> None:
    label = chartraj_fixture(http_server.root, nan_padded=False)
    p = UeaParams(kind="uea", name="CharacterTrajectories", resplit=True, drop_fraction=fraction, seed=56789)
    d = run_prepare(tmp_path, http_server, "ct", p)
    assert d.meta.sizes == {"train": 28, "val": 6, "test": 6}  # 70/15/15 of 40
    assert f"{fraction:.0%} of observations dropped" in d.meta.source
    all_times = []
    for name, split in d.splits.items():
        values = raw_values(d, name)
        ids = np.round(values[:, 0, 0]).astype(int)
        assert [CT_CLASSES[k] for k in split.y] == [label[i] for i in ids]
        for row, i in enumerate(ids):
            n = int(split.mask[row].sum())
            length = CT_LENGTHS[i]
            assert n == length - int(length * fraction)  # the same share of every series
            assert split.mask[row, :n].all()  # observed steps first, then padding
            times = split.t[row, :n]
            assert (np.diff(times) >= 1).all() and times.min() >= 0 and times.max() <= length - 1
            assert np.allclose(values[row, :n, 1], 1000 + times, atol=0.05)  # each value keeps its time
            assert np.allclose(values[row, :n, 2], 2000 + times, atol=0.05)
            assert np.isnan(split.x[row, n:]).all() and (split.t[row, n:] == times[-1]).all()
            all_times.append(times)
        assert split.mask[:, -1].any()  # trimmed to the longest series of the split
    assert any(np.diff(t).max() > 1 for t in all_times)  # irregular


def test_nan_padding_is_not_an_observation(tmp_path, http_server) -> None:
    """The same series, stored unequal-length or NaN-padded to equal length, give the same dataset."""
    p = UeaParams(kind="uea", name="CharacterTrajectories", resplit=True, drop_fraction=0.5, seed=3)
    chartraj_fixture(http_server.root, nan_padded=True)
    padded = run_prepare(tmp_path / "a", http_server, "ct", p)
    chartraj_fixture(http_server.root, nan_padded=False)
    ragged = run_prepare(tmp_path / "b", http_server, "ct", p)
    assert padded.meta == ragged.meta
    for name in ("train", "val", "test"):
        a, b = padded.splits[name], ragged.splits[name]
        assert np.array_equal(a.x, b.x, equal_nan=True) and np.array_equal(a.t, b.t)
        assert np.array_equal(a.mask, b.mask) and np.array_equal(a.y, b.y)


def test_archive_test_split_kept_without_resplit(tmp_path, http_server) -> None:
    eigenworms_fixture(http_server.root)
    d = run_prepare(tmp_path, http_server, "ew", UeaParams(kind="uea", name="EigenWorms", val_fraction=0.2, seed=1))
    assert d.meta.sizes == {"train": 32, "val": 8, "test": 40}
    assert sorted(np.round(raw_values(d, "test")[:, 0, 0]).astype(int).tolist()) == list(range(40, 80))


# ------------------------------------------------------------------------------ bad input


def test_truncated_zip_is_an_error_and_nothing_is_written(tmp_path, http_server) -> None:
    eigenworms_fixture(http_server.root)
    path = http_server.root / "EigenWorms.zip"
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    out = tmp_path / "processed" / "ew"
    with pytest.raises(DataError, match="EigenWorms.zip"):
        run_prepare(tmp_path, http_server, "ew", UeaParams(kind="uea", name="EigenWorms", resplit=True))
    assert not out.exists() and not (tmp_path / "raw" / "ew" / "EigenWorms.zip").exists()


def test_unknown_test_label_names_it(tmp_path, http_server) -> None:
    s = encoded_series(list(range(8)), [5] * 8, 2)
    train = ts_text("Libras", s, ["1", "2"] * 4, ["1", "2", "3"], equal_length=True)
    test = ts_text("Libras", s, ["1", "2", "3", "3"] * 2, ["1", "2", "3"], equal_length=True)
    write_zip(http_server.root, "Libras", train, test)
    with pytest.raises(DataError, match=r"test labels \['3'\] are not among the training classes"):
        run_prepare(tmp_path, http_server, "libras", UeaParams(kind="uea", name="Libras"))
    assert not (tmp_path / "processed" / "libras").exists()


@pytest.mark.parametrize(
    "case, message",
    [
        ("label_outside_header", r"Libras_TEST.ts: labels \['7'\] are not in the header"),
        ("bad_value", r"Libras_TRAIN.ts: not a readable .ts file"),
        ("missing_member", r"no member named Libras_TEST.ts"),
        ("channels", r"different channel counts \[2, 3\]"),
    ],
)
def test_malformed_archive_names_the_member(tmp_path, http_server, case, message) -> None:
    s2, s3 = encoded_series(list(range(8)), [5] * 8, 2), encoded_series(list(range(8)), [5] * 8, 3)
    train = ts_text("Libras", s2, ["1", "2"] * 4, ["1", "2"], equal_length=True)
    test = {
        "label_outside_header": ts_text("Libras", s2, ["1", "7"] * 4, ["1", "2"], equal_length=True),
        "channels": ts_text("Libras", s3, ["1", "2"] * 4, ["1", "2"], equal_length=True),
    }.get(case, train)
    if case == "bad_value":
        train = train.replace("1000.000000", "abc", 1)
    write_zip(http_server.root, "Libras", train, None if case == "missing_member" else test)
    with pytest.raises(DataError, match=message):
        run_prepare(tmp_path, http_server, "libras", UeaParams(kind="uea", name="Libras"))
    assert not (tmp_path / "processed" / "libras").exists()


def test_unknown_name_fails_before_any_download(tmp_path, http_server) -> None:
    p = UeaParams(kind="uea", name="EigenWorm")
    with pytest.raises(ConfigError, match=r"unknown UCR/UEA dataset 'EigenWorm'; valid: \[.*'EigenWorms'.*'UWaveGestureLibrary'"):
        run_prepare(tmp_path, http_server, "x", p)
    assert http_server.requests == [] and not (tmp_path / "raw" / "x").exists()


def test_name_missing_from_the_source_is_a_download_error(tmp_path, http_server) -> None:
    with pytest.raises(DownloadError, match="404"):
        run_prepare(tmp_path, http_server, "x", UeaParams(kind="uea", name="Heartbeat"))
    assert len(http_server.requests) == 1  # a 404 is not retried


def test_names_are_the_archives_30() -> None:
    from aeon.datasets.tsc_datasets import multivariate

    assert len(uea.UEA_MULTIVARIATE) == 30 and set(uea.UEA_MULTIVARIATE) == set(multivariate)
    assert set(uea.AEON_BUNDLED) <= set(uea.UEA_MULTIVARIATE)


# ------------------------------------------------------------------------------ aeon's bundled copies


def test_japanese_vowels_from_aeon_without_download(tmp_path, http_server) -> None:
    p = UeaParams(kind="uea", name="JapaneseVowels", val_fraction=0.2, seed=0)
    assert uea.raw_files(p) == []
    series, labels = uea.load_uea("JapaneseVowels", "train")
    assert len(series) == 270 and series[0].shape[1] == 12 and len(set(labels)) == 9
    d = run_prepare(tmp_path, http_server, "jv", p)
    # nothing downloaded: the folder holds only the note naming aeon's copy (DVC warns about an empty one)
    assert http_server.requests == [] and [f.name for f in (tmp_path / "raw" / "jv").iterdir()] == ["SOURCE.txt"]
    assert "JapaneseVowels_TRAIN.ts sha256 " in (tmp_path / "raw" / "jv" / "SOURCE.txt").read_text()
    assert d.meta.output_size == 9 and d.meta.sizes == {"train": 216, "val": 54, "test": 370}
    lengths = d.splits["test"].mask.sum(axis=1)
    assert lengths.min() == 7 and lengths.max() == 29
    assert "aeon's bundled copy" in d.meta.source


def test_japanese_vowels_drop30_keeps_the_contract(tmp_path, http_server) -> None:
    d = run_prepare(tmp_path, http_server, "jv30", UeaParams(kind="uea", drop_fraction=0.3, seed=3))
    assert sorted(p.name for p in d.folder.iterdir()) == ["digest.json", "meta.json", "test.npz", "train.npz", "val.npz"]
    test = d.splits["test"]
    assert test.mask.sum(axis=1).max() < 29 and d.meta.metric == "accuracy" and d.meta.mode == "max"


def test_basic_motions_is_bundled_too() -> None:
    p = UeaParams(kind="uea", name="BasicMotions", resplit=True, seed=0)
    assert uea.raw_files(p) == []
    d = uea.build("bm", p, None)
    assert d.meta.sizes == {"train": 56, "val": 12, "test": 12}
    assert d.meta.classes == ["badminton", "running", "standing", "walking"]  # aeon lower-cases labels
    assert d.splits["train"].x.shape[1:] == (100, 6)


def test_drop_observations_keeps_times() -> None:
    rng = np.random.default_rng(0)
    series = [np.arange(20, dtype=np.float32).reshape(10, 2), np.ones((7, 2), np.float32)]
    values, times = uea.drop_observations(series, [np.arange(10.0), np.arange(7.0) + 5], 0.3, rng)
    assert [len(v) for v in values] == [7, 5]
    assert np.array_equal(values[0][:, 0] / 2, times[0])  # value i sits at time i
    assert (np.diff(times[0]) >= 1).all() and np.diff(times[0]).max() > 1
    assert set(times[1]) <= set(range(5, 12))  # times are the given ones, not re-indexed
    one = uea.drop_observations([np.ones((3, 1))], [np.arange(3.0)], 0.99, rng)[0]
    assert len(one[0]) == 1  # at least one step is kept
