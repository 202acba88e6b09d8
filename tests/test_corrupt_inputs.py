"""Corrupt intermediate files (issue 14, part 4): a truncated or hand-edited result JSON, processed
dataset or lock file is one line naming the file, what is wrong and the command that rebuilds it.

The result files go through the real CLI (typer's runner: exit status 2, one line on stderr);
the processed arrays through `load_dataset`, which `search` and `final` call only once Ray has
started (one meta.json case goes through the CLI, as `search` reads it before Ray).
"""

from __future__ import annotations

import json
import re
import zipfile
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pytest
from typer.testing import CliRunner

from pipeline.cli import app
from pipeline.config import XorParams
from pipeline.data.contract import load_dataset, load_meta, save_dataset
from pipeline.data.download import RawFile, fetch
from pipeline.data.kinds.xor import build as build_xor
from pipeline.errors import CorruptInputError
from pipeline.stores.paths import final_result_path, processed_dir, search_result_path
from tests import test_data_person_activity as person
from tests.conftest import default_params, write_params

RUNNER = CliRunner()
D, F = "xor_event", "cfc"

SEARCH = {"dataset": D, "family": F, "metric": "accuracy", "mode": "max", "best_config": {"lr": 1e-3, "hidden_size": 8},
          "best_val": 0.9, "trial_seed": 0, "sampler_seed": 0, "n_trials": 2, "n_failed": 0,
          "trials": [{"config": {"lr": 1e-3}, "best_val": 0.9, "status": "ok"},
                     {"config": {"lr": 1e-2}, "best_val": None, "status": "error"}]}
FINAL = {"dataset": D, "family": F, "metric": "accuracy", "mode": "max", "config": {"lr": 1e-3}, "epochs": 2,
         "n_seeds": 2, "val_mean": 0.9, "val_std": 0.01, "test_mean": 0.8, "test_std": 0.02, "params": 100,
         "seconds_per_epoch": 0.5, "n_trials": 2, "n_failed": 0, "model_uri": "models:/m/1", "model_seed": 1,
         "seeds": [{"seed": s, "val": 0.9, "test": 0.8, "curve": [0.5, 0.9]} for s in (1, 2)], "robustness": []}


def _without(record: dict[str, Any], key: str) -> dict[str, Any]:
    return {k: v for k, v in record.items() if k != key}


def _truncated(record: dict[str, Any]) -> str:
    text = json.dumps(record, indent=2)
    return text[: len(text) // 2]


# name: (text of the file, what the message says)
BAD_SEARCH = {
    "truncated": (_truncated(SEARCH), r"truncated JSON at line \d+"),
    "empty": ("", r"empty file"),
    "not_json": ("<html>502 Bad Gateway</html>", r"invalid JSON at line 1, column 1"),
    "no_best_config": (json.dumps(_without(SEARCH, "best_config")), r"missing key 'best_config'"),
    "seed_a_string": (json.dumps({**SEARCH, "trial_seed": "7"}),
                      r"trial_seed is a string \('7'\), expected an integer"),
    "lr_missing": (json.dumps({**SEARCH, "best_config": {"hidden_size": 8}}), r"missing key 'best_config\.lr'"),
    "mode": (json.dumps({**SEARCH, "mode": "up"}), r"mode is 'up', expected one of \['max', 'min'\]"),
    "a_list": ("[1, 2]", r"the file is a list, expected an object"),
}
BAD_FINAL = {
    "truncated": (_truncated(FINAL), r"truncated JSON at line \d+"),
    "no_seeds": (json.dumps(_without(FINAL, "seeds")), r"missing key 'seeds'"),
    "empty_seeds": (json.dumps({**FINAL, "seeds": []}), r"seeds has 0 items, expected at least 1"),
    "mean_a_string": (json.dumps({**FINAL, "val_mean": "0.9"}), r"val_mean is a string \('0\.9'\), expected a number"),
    "seed_score": (json.dumps({**FINAL, "seeds": [{"val": 0.9, "test": None, "curve": []}]}),
                   r"seeds\[0\]\.test is null, expected a number"),
}


@pytest.fixture
def project(project: Path) -> Path:
    """The real params.yaml, shrunk to one dataset and one family, and an (empty) processed folder."""
    params = default_params()
    write_params(project, {**params, "datasets": [D], "families": [F]})
    processed_dir(project, D).mkdir(parents=True)
    return project


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def _one_line_error(*args: str) -> str:
    """Run the CLI; it must exit with status 2 and print exactly one line on stderr."""
    result = RUNNER.invoke(app, list(args))
    lines = result.stderr.splitlines()
    assert result.exit_code == 2 and len(lines) == 1 and lines[0].startswith("ctsweep: error: "), result.output
    return lines[0]


def _names(line: str, path: Path, producer: str, why: str) -> None:
    pattern = re.escape(f"{path} is corrupt (") + ".*" + why + ".*" + re.escape(f"); rebuild it with `{producer}`")
    assert re.search(pattern, line), line


@pytest.mark.parametrize("case", list(BAD_SEARCH))
def test_final_names_a_corrupt_search_result_and_ctsweep_search(case: str, project: Path) -> None:
    text, why = BAD_SEARCH[case]
    path = _write(search_result_path(project, D, F), text)
    _names(_one_line_error("final", D, F, "--root", str(project)), path, f"ctsweep search {D} {F}", why)
    assert not (project / "mlflow.db").exists()  # refused before anything started


@pytest.mark.parametrize("case", list(BAD_FINAL))
def test_report_names_a_corrupt_final_result_and_ctsweep_final(case: str, project: Path) -> None:
    text, why = BAD_FINAL[case]
    path = _write(final_result_path(project, D, F), text)
    _write(search_result_path(project, D, F), json.dumps(SEARCH))
    _names(_one_line_error("report", "--root", str(project)), path, f"ctsweep final {D} {F}", why)
    assert not (project / "reports").exists()


def test_report_names_a_corrupt_search_result(project: Path) -> None:
    _write(final_result_path(project, D, F), json.dumps(FINAL))
    bad = {**SEARCH, "trials": [{"config": {"lr": "fast"}, "best_val": 0.5}]}
    path = _write(search_result_path(project, D, F), json.dumps(bad))
    _names(_one_line_error("report", "--root", str(project)), path, f"ctsweep search {D} {F}",
           r"trials\[0\]\.config\.lr is a string \('fast'\), expected a number")


@pytest.mark.parametrize("record, why", [
    (_truncated(FINAL), r"truncated JSON"),
    (json.dumps(_without(FINAL, "model_uri")), r"missing key 'model_uri'"),
    (json.dumps({**FINAL, "n_seeds": 2.5}), r"n_seeds is a number \(2\.5\), expected an integer"),
])
def test_promote_names_a_corrupt_final_result_and_ctsweep_final(record: str, why: str, project: Path) -> None:
    path = _write(final_result_path(project, D, F), record)
    line = _one_line_error("promote", "--dataset", D, "--dry-run", "--root", str(project))
    _names(line, path, f"ctsweep final {D} {F}", why)


# ----------------------------------------------------------------------------- processed dataset


def _dataset(root: Path) -> Path:
    folder = processed_dir(root, D)
    save_dataset(folder, build_xor(D, XorParams(kind="xor", n_train=40, n_test=10, seed=3, event_based=True)))
    return folder


def _edit_meta(change: Callable[[dict], None]) -> Callable[[Path], None]:
    def edit(folder: Path) -> None:
        meta = json.loads((folder / "meta.json").read_text())
        change(meta)
        (folder / "meta.json").write_text(json.dumps(meta))
    return edit


def _edit_split(name: str, change: Callable[[dict], None]) -> Callable[[Path], None]:
    def edit(folder: Path) -> None:
        with np.load(folder / f"{name}.npz") as z:
            arrays = {k: z[k] for k in z.files}
        change(arrays)
        np.savez_compressed(folder / f"{name}.npz", **arrays)
    return edit


def _cut(name: str, keep: float = 0.5) -> Callable[[Path], None]:
    def edit(folder: Path) -> None:
        data = (folder / name).read_bytes()
        (folder / name).write_bytes(data[: int(len(data) * keep)])
    return edit


def _zip_bad_member(folder: Path) -> None:
    """A whole zip whose member's bytes are damaged: the CRC or the inflate fails on reading."""
    path = folder / "val.npz"
    data = bytearray(path.read_bytes())
    with zipfile.ZipFile(path) as z:
        info = z.getinfo("x.npy")
    start = info.header_offset + 30 + len(info.filename) + len(info.extra) + 10
    data[start:start + 20] = bytes(20)
    path.write_bytes(bytes(data))


BAD_DATASET = {  # name: (edit of a good dataset, file named, what the message says)
    "meta_truncated": (_cut("meta.json"), "meta.json", r"truncated JSON at line \d+"),
    "meta_missing": (lambda f: (f / "meta.json").unlink(), "meta.json", r"no such file"),
    "meta_no_task": (_edit_meta(lambda m: m.pop("task")), "meta.json", r"missing key 'task'"),
    "meta_per_step_text": (_edit_meta(lambda m: m.update(per_step="no")), "meta.json",
                           r"per_step is a string \('no'\), expected a boolean"),
    "meta_unknown_key": (_edit_meta(lambda m: m.update(colour="red")), "meta.json", r"unknown keys \['colour'\]"),
    "meta_task": (_edit_meta(lambda m: m.update(task="ranking")), "meta.json", r"task is 'ranking'"),
    "meta_norm": (_edit_meta(lambda m: m.update(norm_std=[1.0, 2.0])), "meta.json",
                  r"norm_std has 2 values for 1 channels"),
    "meta_zero_std": (_edit_meta(lambda m: m.update(norm_std=[0.0])), "meta.json", r"expected finite values above 0"),
    "npz_truncated": (_cut("train.npz"), "train.npz", r"not a readable \.npz file"),
    "npz_member": (_zip_bad_member, "val.npz", r"not a readable \.npz file"),
    "npz_missing": (lambda f: (f / "test.npz").unlink(), "test.npz", r"no such file"),
    "npz_no_y": (_edit_split("val", lambda a: a.pop("y")), "val.npz", r"missing arrays \['y'\]"),
    "x_channels": (_edit_split("test", lambda a: a.update(x=np.concatenate([a["x"]] * 2, axis=2))), "test.npz",
                   r"x has shape \(\d+, \d+, 2\); expected \(N, L, 1\)"),
    "t_shape": (_edit_split("train", lambda a: a.update(t=a["t"][:, :-1])), "train.npz", r"t has shape"),
    "y_length": (_edit_split("train", lambda a: a.update(y=a["y"][:-1])), "train.npz", r"y has shape"),
    "mask_dtype": (_edit_split("val", lambda a: a.update(mask=a["mask"].astype(float))), "val.npz",
                   r"mask has dtype float64; expected bool"),
}


@pytest.mark.parametrize("case", list(BAD_DATASET))
def test_a_corrupt_processed_dataset_names_the_file_and_ctsweep_prepare(case: str, tmp_path: Path) -> None:
    edit, name, why = BAD_DATASET[case]
    folder = _dataset(tmp_path)
    edit(folder)
    with pytest.raises(CorruptInputError) as err:
        load_dataset(folder)
    assert "\n" not in str(err.value)
    _names(str(err.value), folder / name, f"ctsweep prepare {D}", why)


def test_a_good_processed_dataset_loads(tmp_path: Path) -> None:
    data = load_dataset(_dataset(tmp_path))
    assert data.meta == load_meta(processed_dir(tmp_path, D)) and len(data.splits["test"]) == 10


def test_search_names_a_hand_edited_meta_json_through_the_cli(project: Path) -> None:
    folder = _dataset(project)
    _edit_meta(lambda m: m.update(output_size="1"))(folder)
    line = _one_line_error("search", D, F, "--root", str(project))
    _names(line, folder / "meta.json", f"ctsweep prepare {D}", r"output_size is a string \('1'\), expected an integer")


# ----------------------------------------------------------------------------- lock file

BAD_LOCK = {
    "truncated": ('{\n  "https://x/a.zip": {\n    "sha256": "ab', r"truncated JSON at line 3"),
    "a_list": ("[]", r"the file is a list, expected an object"),
    "no_sha256": ('{"https://x/a.zip": {"size": 3}}', r"missing key 'https://x/a\.zip\.sha256'"),
    "not_hex": ('{"https://x/a.zip": {"sha256": "xyz"}}', r"sha256 is 'xyz', expected 64 hexadecimal digits"),
}


@pytest.mark.parametrize("case", list(BAD_LOCK))
def test_a_corrupt_lock_file_is_named_before_any_download(case: str, tmp_path: Path) -> None:
    text, why = BAD_LOCK[case]
    lock, source = _write(tmp_path / "raw.lock", text), tmp_path / "mirror"
    _write(source / "f.txt", "data")
    with pytest.raises(CorruptInputError) as err:
        fetch([RawFile("https://example.org/f.txt", "f.txt")], tmp_path / "raw", lock, source=str(source))
    pattern = re.escape(f"{lock} is corrupt (") + ".*" + why + re.escape(f"); restore it with `git checkout -- {lock}`")
    assert re.search(pattern, str(err.value)), err.value
    assert lock.read_text() == text and not (tmp_path / "raw" / "f.txt").exists()


def test_fetch_names_a_corrupt_lock_file_through_the_cli(project: Path, http_server) -> None:
    lines, _ = person.person_lines()
    person.write_person(http_server.root, lines)
    lock = _write(project / "data" / "raw.lock", '{"https://x": {"sha256": ')
    line = _one_line_error("fetch", "person_activity", "--source", http_server.url, "--root", str(project))
    assert f"{lock} is corrupt (truncated JSON at line 1); restore it with `git checkout -- {lock}`" in line
    assert http_server.requests == []  # refused before downloading anything
