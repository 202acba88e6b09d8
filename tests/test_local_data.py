"""The `local` kind (your own CSV, .ts and .npz files) and UCR univariate names through `prepare`:
real files written here, prepared into the contract, one training epoch each; every malformed
file refused in one line naming the file and the row or series, before data/processed is touched;
fetch copies the file and records its sha256, following it when it changes."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from pipeline.data.contract import Dataset, load_dataset
from pipeline.data.kinds.local.files import MEMORY_FACTOR, memory_bytes
from pipeline.data.prepare import fetch, prepare
from pipeline.config.datasets import LocalParams, UeaParams
from pipeline.errors import ConfigError, DataError
from pipeline.training.loop import Trainer, TrainSettings

SMALL_CFC = {"hidden_size": 8, "backbone_units": 8, "backbone_layers": 1}
CLASSES = ("walk", "run", "sit")


def run(root: Path, name: str, **section) -> Dataset:
    """`prepare` as the CLI calls it, in the project layout under `root`."""
    p = section.pop("params", None) or LocalParams(kind="local", **section)
    out = root / "data" / "processed" / name
    prepare(name, p, out, root / "data" / "raw" / name, root / "data" / "raw.lock")
    return load_dataset(out)


def one_epoch(d: Dataset) -> float:
    trainer = Trainer("cfc", SMALL_CFC, TrainSettings(lr=1e-2, batch_size=16), d, seed=0)
    assert np.isfinite(trainer.run_epoch()["train_loss"])
    return trainer.evaluate("val")


def csv_rows(n: int = 30, seed: int = 0, per_step: bool = False, split: bool = False, first: int = 0) -> list[str]:
    """Long-format rows of n series with irregular times and an empty cell here and there."""
    rng = np.random.default_rng(seed)
    rows = []
    for s in range(first, first + n):
        label = CLASSES[s % 3]
        times = np.cumsum(rng.uniform(0.1, 1.0, rng.integers(4, 9)))
        for k, t in enumerate(times):
            a = "" if k == 1 else f"{np.sin(t) + s % 3:.4f}"
            lab = CLASSES[(s + (k >= 2)) % 3] if per_step else label
            extra = f",{['train', 'train', 'val', 'test', 'train'][s % 5]}" if split else ""
            rows.append(f"s{s},{t:.3f},{a},{rng.normal():.4f},{lab}{extra}")
    return rows


def write_csv(path: Path, rows: list[str], header: str = "series,time,a,b,label") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join([header, *rows]) + "\n")
    return path


def ts_file(path: Path, series: list[np.ndarray], labels: list[str], classes: list[str]) -> Path:
    """aeon's .ts format written by hand; series are (C, L_i), unequal lengths allowed."""
    equal = len({s.shape[1] for s in series}) == 1
    lines = ["@problemName Fixture", "@timeStamps false", "@missing false",
             f"@univariate {'true' if series[0].shape[0] == 1 else 'false'}", f"@dimensions {series[0].shape[0]}",
             f"@equalLength {'true' if equal else 'false'}"]
    if equal:
        lines.append(f"@seriesLength {series[0].shape[1]}")
    lines += [f"@classLabel true {' '.join(classes)}", "@data"]
    lines += [":".join(",".join(f"{v:.5f}" for v in row) for row in s) + f":{lab}" for s, lab in zip(series, labels)]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")
    return path


# ------------------------------------------------------------------------------ CSV


def test_csv_per_sequence_labels_split_by_rule(tmp_path: Path) -> None:
    write_csv(tmp_path / "mine" / "walks.csv", csv_rows())
    d = run(tmp_path, "walks", path="mine/walks.csv")  # relative to the project root
    m = d.meta
    assert (m.task, m.metric, m.per_step, m.output_size) == ("classification", "accuracy", False, 3)
    assert m.classes == sorted(CLASSES) and m.channels == ["a", "b"]
    assert m.sizes == {"train": 21, "val": 4, "test": 5} or sum(m.sizes.values()) == 30
    train = d.splits["train"]
    assert np.isnan(train.x[:, 1, 0]).all() and not np.isnan(train.x[:, 0, 0]).any()  # empty cell = not observed
    assert np.allclose(np.nanmean(train.x[train.mask], axis=0), 0, atol=1e-5)  # standardised with train statistics
    assert 0.0 <= one_epoch(d) <= 1.0


def test_csv_split_column(tmp_path: Path) -> None:
    write_csv(tmp_path / "s.csv", csv_rows(split=True), header="series,time,a,b,label,split")
    d = run(tmp_path, "s", path=str(tmp_path / "s.csv"))  # an absolute path
    assert d.meta.sizes == {"train": 18, "val": 6, "test": 6}
    assert "split column" in d.meta.source
    assert 0.0 <= one_epoch(d) <= 1.0


def test_csv_separate_files_with_validation_carved_from_train(tmp_path: Path) -> None:
    write_csv(tmp_path / "f" / "train.csv", csv_rows(30))
    write_csv(tmp_path / "f" / "test.csv", csv_rows(9, seed=1, first=30))
    d = run(tmp_path, "f", path="f", val_fraction=0.2)
    assert d.meta.sizes == {"train": 24, "val": 6, "test": 9}
    assert sorted(p.name for p in (tmp_path / "data" / "raw" / "f").iterdir()) == ["test.csv", "train.csv"]
    assert 0.0 <= one_epoch(d) <= 1.0


def test_csv_per_step_labels_are_inferred(tmp_path: Path) -> None:
    write_csv(tmp_path / "p.csv", csv_rows(per_step=True))
    d = run(tmp_path, "p", path="p.csv")
    train = d.splits["train"]
    assert d.meta.per_step and train.y.shape == train.mask.shape and train.y.dtype == np.int64
    assert 0.0 <= one_epoch(d) <= 1.0


def test_csv_fractional_labels_are_regression(tmp_path: Path) -> None:
    fixed = [r.rsplit(",", 1)[0] + f",{0.5 + int(r.split(',')[0][1:]) / 7:.3f}" for r in csv_rows()]  # one per series
    d = run(tmp_path, "reg", path=str(write_csv(tmp_path / "reg.csv", fixed)))
    assert (d.meta.task, d.meta.metric, d.meta.output_size) == ("regression", "mse", 1)
    assert d.splits["train"].y.shape == (d.meta.sizes["train"], 1)
    assert np.isfinite(one_epoch(d))


def test_many_integer_labels_need_the_task_key(tmp_path: Path) -> None:
    rows = [f"s{i},{k},{k * 0.5},1,{i}" for i in range(30) for k in range(3)]
    write_csv(tmp_path / "ints.csv", rows)
    with pytest.raises(ConfigError, match=r"prepare\.ints\.task: cannot infer; .*30 distinct integers"):
        run(tmp_path, "ints", path="ints.csv")
    d = run(tmp_path, "ints", path="ints.csv", task="regression")
    assert d.meta.metric == "mse"


# ------------------------------------------------------------------------------ .ts and .npz


def test_ts_univariate_single_file(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    labels = ["a", "b"] * 15
    series = [np.sin(np.linspace(0, 3, 12) * (1 + (lab == "b")))[None] + rng.normal(0, 0.1, (1, 12)) for lab in labels]
    ts_file(tmp_path / "uni.ts", series, labels, ["a", "b"])
    d = run(tmp_path, "uni", path="uni.ts")
    assert d.meta.channels == ["c0"] and d.meta.classes == ["a", "b"] and d.meta.output_size == 2
    assert d.splits["train"].x.shape[1:] == (12, 1)
    assert 0.0 <= one_epoch(d) <= 1.0


def test_ts_multivariate_unequal_length_folder(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    for split, n in (("TRAIN", 20), ("TEST", 8)):
        labels = ["x", "y"] * (n // 2)
        series = [rng.normal(size=(3, int(rng.integers(5, 11)))) for _ in labels]
        ts_file(tmp_path / "ts" / f"Mine_{split}.ts", series, labels, ["x", "y"])
    (tmp_path / "ts" / "README.txt").write_text("not used")
    d = run(tmp_path, "mv", path="ts")
    assert d.meta.channels == ["c0", "c1", "c2"] and d.meta.sizes == {"train": 17, "val": 3, "test": 8}
    lengths = d.splits["test"].mask.sum(axis=1)
    assert lengths.min() >= 5 and lengths.max() <= 10
    assert 0.0 <= one_epoch(d) <= 1.0


def test_npz_folder_in_the_contract(tmp_path: Path) -> None:
    src = run(tmp_path, "src", path=str(write_csv(tmp_path / "src.csv", csv_rows())))
    folder = tmp_path / "npz"
    folder.mkdir()
    for k, s in src.splits.items():  # contract arrays, as another tool might write them
        np.savez(folder / f"{k}.npz", x=s.x * 2 + 1, t=s.t, mask=s.mask, y=s.y)
    d = run(tmp_path, "n", path="npz", classes=list(CLASSES))
    assert d.meta.sizes == src.meta.sizes and d.meta.classes == list(CLASSES)
    assert np.allclose(d.splits["test"].x, src.splits["test"].x, equal_nan=True, atol=1e-5)  # standardised again
    assert 0.0 <= one_epoch(d) <= 1.0


def test_ucr_univariate_name_from_aeons_bundled_copy(tmp_path: Path) -> None:
    d = run(tmp_path, "gunpoint", params=UeaParams(kind="uea", name="GunPoint"))
    assert d.meta.sizes == {"train": 40, "val": 10, "test": 150}
    assert d.meta.channels == ["c0"] and d.meta.output_size == 2 and d.meta.source.startswith("UCR GunPoint")
    raw = tmp_path / "data" / "raw" / "gunpoint"
    assert [f.name for f in raw.iterdir()] == ["SOURCE.txt"]  # nothing downloaded: the note naming aeon's copy
    assert "aeon/datasets/data/GunPoint/GunPoint_TEST.ts sha256 " in (raw / "SOURCE.txt").read_text()
    assert 0.0 <= one_epoch(d) <= 1.0


def test_unknown_archive_name_lists_univariate_names_too(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"unknown UCR/UEA dataset 'GunPont'; valid: \[.*'GunPoint'.*'JapaneseVowels'"):
        run(tmp_path, "g", params=UeaParams(kind="uea", name="GunPont"))


# ------------------------------------------------------------------------------ bad input


def _bad_files(root: Path, case: str) -> tuple[str, str]:
    """Write one malformed input; return (path key, expected message regex)."""
    good = csv_rows()
    if case == "label_missing":
        rows = list(good)
        rows[7] = rows[7].rsplit(",", 1)[0] + ","
        write_csv(root / "d.csv", rows)
        return "d.csv", r"/d\.csv: line 9, series 's\d+': empty 'label' cell"
    if case == "channels_differ":
        write_csv(root / "f" / "train.csv", good)
        write_csv(root / "f" / "test.csv", csv_rows(9, first=30), header="series,time,a,c,label")
        return "f", r"f/test\.csv: channels \['a', 'c'\] differ from .*f/train\.csv's \['a', 'b'\]"
    if case == "time_not_increasing":
        rows = list(good)
        s, t, rest = rows[3].split(",", 2)
        rows[3] = f"{s},0.001,{rest}"
        write_csv(root / "d.csv", rows)
        return "d.csv", r"d\.csv: line 5, series 's0': time 0.001 is not after .*increasing times"
    if case == "class_only_in_test":
        write_csv(root / "f" / "train.csv", good)
        test = csv_rows(9, first=30)
        test[-1] = test[-1].rsplit(",", 1)[0] + ",swim"
        write_csv(root / "f" / "test.csv", test)
        return "f", r"f/test\.csv: line \d+, series 's38': class 'swim' is not among the classes of the train labels"
    if case == "empty_file":
        (root / "d.csv").write_text("")
        return "d.csv", r"d\.csv: empty file \(0 bytes\)"
    if case == "header_only":
        write_csv(root / "d.csv", [])
        return "d.csv", r"d\.csv: a header but no rows"
    if case == "extension":
        (root / "d.txt").write_text("series,time,a,label\n")
        return "d.txt", r"d\.txt: unknown file type '\.txt'; allowed: \.csv, \.npz, \.ts"
    if case == "too_large":  # a sparse file: its size without its bytes on disk
        with open(root / "d.csv", "wb") as f:
            f.truncate(memory_bytes() // MEMORY_FACTOR * 2)
        return "d.csv", r"d\.csv: [\d.]+ GiB of data is too large to read into this machine's [\d.]+ GiB of memory"
    if case == "not_a_number":
        rows = list(good)
        rows[4] = rows[4].replace(rows[4].split(",")[3], "high", 1)
        write_csv(root / "d.csv", rows)
        return "d.csv", r"d\.csv: line 6, series 's0', column 'b': 'high' is not a finite number"
    if case == "ts_channels":
        series = [np.ones((2, 5))] * 10 + [np.ones((1, 5))] * 10
        ts_file(root / "d.ts", series, ["a", "b"] * 10, ["a", "b"])
        return "d.ts", r"d\.ts: .*(dimension|channel)"
    raise AssertionError(case)


CASES = ["label_missing", "channels_differ", "time_not_increasing", "class_only_in_test", "empty_file", "header_only",
         "extension", "too_large", "not_a_number", "ts_channels"]


@pytest.mark.parametrize("case", CASES)
def test_bad_input_is_one_line_naming_file_and_row(tmp_path: Path, case: str) -> None:
    path, message = _bad_files(tmp_path, case)
    with pytest.raises((DataError, ConfigError), match=message) as err:
        run(tmp_path, "d", path=path)
    assert "\n" not in str(err.value)
    assert not (tmp_path / "data" / "processed" / "d").exists()
    assert not any(p.stat().st_size > 10**8 for p in (tmp_path / "data" / "raw").rglob("*")) if case == "too_large" else True


def test_missing_path_names_the_key_and_the_resolved_path(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=rf"prepare\.gone\.path: {tmp_path}/nowhere/d\.csv does not exist"):
        run(tmp_path, "gone", path="nowhere/d.csv")
    assert not (tmp_path / "data" / "processed" / "gone").exists()


def test_a_failed_prepare_keeps_the_previous_dataset(tmp_path: Path) -> None:
    write_csv(tmp_path / "d.csv", csv_rows())
    before = run(tmp_path, "d", path="d.csv")
    (tmp_path / "d.csv").write_text("")
    with pytest.raises(DataError, match="empty file"):
        run(tmp_path, "d", path="d.csv")
    assert load_dataset(tmp_path / "data" / "processed" / "d").meta == before.meta


# ------------------------------------------------------------------------------ fetch and DVC


def test_fetch_copies_the_file_and_records_its_sha256_which_follows_changes(tmp_path: Path) -> None:
    import hashlib

    src = write_csv(tmp_path / "d.csv", csv_rows())
    raw, lock = tmp_path / "data" / "raw" / "d", tmp_path / "data" / "raw.lock"
    p = LocalParams(kind="local", path="d.csv")
    assert fetch(p, raw, lock) == [raw / "d.csv"]
    entry = json.loads(lock.read_text())["local:d/d.csv"]
    assert entry["sha256"] == hashlib.sha256(src.read_bytes()).hexdigest() and entry["source"] == "d.csv"
    assert (raw / "d.csv").read_bytes() == src.read_bytes()
    mtime = (raw / "d.csv").stat().st_mtime_ns
    fetch(p, raw, lock)
    assert (raw / "d.csv").stat().st_mtime_ns == mtime  # unchanged: not copied again

    write_csv(src, csv_rows(seed=5))
    fetch(p, raw, lock)
    changed = json.loads(lock.read_text())["local:d/d.csv"]["sha256"]
    assert changed != entry["sha256"] and changed == hashlib.sha256(src.read_bytes()).hexdigest()
    assert (raw / "d.csv").read_bytes() == src.read_bytes()

    write_csv(tmp_path / "e.csv", csv_rows())  # another file: the old copy and its entry go
    fetch(LocalParams(kind="local", path="e.csv"), raw, lock)
    assert [f.name for f in raw.iterdir()] == ["e.csv"] and list(json.loads(lock.read_text())) == ["local:d/e.csv"]


@pytest.mark.slow
def test_dvc_repro_prepares_again_when_the_local_file_changes(tmp_path: Path) -> None:
    """fetch is always_changed (dvc.yaml): it reruns, copies only a changed file, and prepare
    follows only then."""
    import os
    import shutil
    import subprocess
    import sys

    import yaml

    from tests.conftest import REPO, default_params, write_params

    def dvc(*cmd: str) -> str:
        env = {k: v for k, v in os.environ.items() if k not in ("MLFLOW_TRACKING_URI", "RAY_ADDRESS")}
        env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"
        done = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, f"{cmd}:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
        return done.stdout

    root = tmp_path / "project"
    shutil.copytree(REPO / "search_spaces", root / "search_spaces")
    shutil.copytree(REPO / "pipeline", root / "pipeline", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "dvc.yaml", root / "dvc.yaml")
    params = default_params()
    params["datasets"] = ["mine"]
    params["prepare"]["mine"] = {"kind": "local", "path": "mine.csv"}
    write_params(root, params)
    write_csv(root / "mine.csv", csv_rows())
    dvc("git", "init", "-q")
    dvc("dvc", "init", "-q")
    dvc("dvc", "repro", "prepare@mine")
    first = yaml.safe_load((root / "dvc.lock").read_text())["stages"]["prepare@mine"]["outs"]
    assert "didn't change" in dvc("dvc", "repro", "prepare@mine")  # fetch reran; its output did not change
    write_csv(root / "mine.csv", csv_rows(seed=3))
    dvc("dvc", "repro", "prepare@mine")
    assert yaml.safe_load((root / "dvc.lock").read_text())["stages"]["prepare@mine"]["outs"] != first
