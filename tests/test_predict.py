"""`predict_file` against a real MLflow store in a temp folder, with real (untrained) CfC models."""

from __future__ import annotations

import csv
import re
import warnings
from pathlib import Path
from typing import Iterator

import mlflow
import numpy as np
import pandas as pd
import pytest
import torch
from mlflow.tracking import MlflowClient

from pipeline.stores import tracking
from pipeline.data.contract import Meta
from pipeline.errors import CtsweepError, DataError
from pipeline.serving.predict import load_registered, predict_file
from pipeline.serving.screening import _check_output, screen
from pipeline.serving.series import Series, read_series
from pipeline.stores.tracking import registered_name
from pipeline.serving.pyfunc import log_model_from_state, predict_arrays
from pipeline.training.loop import build_model

CHANNELS = ["a", "b"]
KWARGS = {"hidden_size": 8, "backbone_units": 8, "backbone_layers": 1}
NORM = {"norm_mean": [1.0, -2.0], "norm_std": [2.0, 0.5]}
METAS = {
    "toy": Meta(name="toy", task="classification", per_step=False, output_size=3, metric="accuracy",
                channels=CHANNELS, source="hand-made", classes=["low", "mid", "high"], **NORM),
    "steps": Meta(name="steps", task="binary", per_step=True, output_size=1, metric="auroc",
                  channels=CHANNELS, source="hand-made", **NORM),
    "reg": Meta(name="reg", task="regression", per_step=False, output_size=2, metric="mse",
                channels=CHANNELS, source="hand-made", **NORM),
}


def _register(root: Path, meta: Meta, alias: bool = True) -> dict[str, torch.Tensor]:
    """Log a real untrained CfC for `meta` to a real run, register it and (optionally) alias it."""
    torch.manual_seed(len(meta.name))
    client, exp = tracking.experiment_id(root, meta.name)
    run = tracking.start_run(client, exp, "final/cfc", {"stage": "final", "family": "cfc"})
    state = build_model("cfc", meta, len(CHANNELS), KWARGS).state_dict()
    uri = log_model_from_state(run, tracking.tracking_uri(root), "cfc", KWARGS, len(CHANNELS), state, meta)
    version = mlflow.register_model(uri, registered_name(meta.name), tags={"family": "cfc"})
    if alias:
        client.set_registered_model_alias(registered_name(meta.name), "champion", version.version)
    return state


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, dict[str, dict]]]:
    """One store with a champion for each of METAS, plus `bare`: a version without the alias."""
    root = tmp_path_factory.mktemp("store")
    with pytest.MonkeyPatch.context() as mp:
        mp.delenv("MLFLOW_TRACKING_URI", raising=False)
        states = {name: _register(root, meta) for name, meta in METAS.items()}
        _register(root, Meta(**{**METAS["toy"].__dict__, "name": "bare"}), alias=False)
        yield root, states


@pytest.fixture
def root(store: tuple[Path, dict], monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    return store[0]


def _series() -> Series:
    """Three series of lengths 4, 2, 3 with missing values, padded to L = 4."""
    nan = np.nan
    x = np.array([[[1.0, 2.0], [nan, 0.5], [3.0, nan], [2.5, 1.5]],
                  [[0.0, -1.0], [4.0, 4.0], [nan, nan], [nan, nan]],
                  [[nan, 3.0], [1.0, 1.0], [-2.0, 0.0], [nan, nan]]], np.float32)
    t = np.array([[0.0, 0.5, 1.5, 3.0], [0.0, 2.0, 2.0, 2.0], [1.0, 1.25, 4.0, 4.0]], np.float32)
    mask = np.array([[1, 1, 1, 1], [1, 1, 0, 0], [1, 1, 1, 0]], bool)
    return Series(["s1", "s2", "s3"], x, t, mask)


def _write_npz(path: Path, s: Series) -> Path:
    np.savez(path, x=s.x, t=s.t, mask=s.mask, ids=np.array(s.ids))
    return path


def _write_csv(path: Path, s: Series, columns: tuple[str, ...] = ("series", "time", "a", "b")) -> Path:
    """Long format: each series' first step (in id order), then the other steps of all series
    interleaved, latest first, so reading must group and sort them."""
    steps = [(i, 0) for i in range(len(s.ids))] + [
        (i, j) for j in reversed(range(1, s.x.shape[1])) for i in range(len(s.ids)) if s.mask[i, j]]
    rows = [(s.ids[i], s.t[i, j], *s.x[i, j]) for i, j in steps]
    lines = [",".join(columns)] + [",".join([name, repr(float(t))] + ["" if np.isnan(v) else repr(float(v))
                                                                     for v in values])
                                   for name, t, *values in rows]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_csv_is_grouped_sorted_and_padded_like_the_npz(tmp_path: Path) -> None:
    s = _series()
    got = read_series(_write_csv(tmp_path / "s.csv", s), CHANNELS)
    assert got.ids == s.ids
    np.testing.assert_array_equal(got.mask, s.mask)
    np.testing.assert_array_equal(got.t, s.t)
    np.testing.assert_array_equal(got.x, s.x)  # NaN where missing and padded


def test_npz_and_csv_give_identical_predictions(root: Path, tmp_path: Path) -> None:
    s = _series()
    from_npz = predict_file(root, "toy", _write_npz(tmp_path / "s.npz", s), None)
    from_csv = predict_file(root, "toy", _write_csv(tmp_path / "s.csv", s), tmp_path / "out.csv")
    assert from_npz == from_csv
    assert [r["series"] for r in from_npz] == s.ids
    assert set(from_npz[0]) == {"series", "prediction", "p_low", "p_mid", "p_high"}
    assert all(r["prediction"] in ("low", "mid", "high") for r in from_npz)
    with open(tmp_path / "out.csv", newline="") as f:
        written = list(csv.DictReader(f))
    assert [r["series"] for r in written] == s.ids
    assert [float(r["p_mid"]) for r in written] == [r["p_mid"] for r in from_csv]


def test_predictions_equal_predict_arrays(root: Path, store: tuple[Path, dict], tmp_path: Path) -> None:
    s = _series()
    rows = predict_file(root, "toy", _write_npz(tmp_path / "s.npz", s), None)
    model = build_model("cfc", METAS["toy"], 2, KWARGS)
    model.load_state_dict(store[1]["toy"])
    expected = predict_arrays(model.eval(), METAS["toy"], "cfc", KWARGS, s.x, s.t, s.mask)  # (3, 3)
    got = np.array([[r["p_low"], r["p_mid"], r["p_high"]] for r in rows])
    np.testing.assert_allclose(got, expected, rtol=1e-6)
    assert [r["prediction"] for r in rows] == [METAS["toy"].classes[k] for k in expected.argmax(1)]


def test_npz_without_mask_or_ids_defaults_to_the_observed_prefix(root: Path, tmp_path: Path) -> None:
    s = _series()
    path = tmp_path / "bare.npz"
    np.savez(path, x=s.x, t=s.t)
    got = read_series(path, CHANNELS)
    assert got.ids == ["0", "1", "2"]
    np.testing.assert_array_equal(got.mask, s.mask)  # each row's padding is all NaN
    with_mask = predict_file(root, "toy", _write_npz(tmp_path / "s.npz", s), None)
    assert [r["p_low"] for r in predict_file(root, "toy", path, None)] == [r["p_low"] for r in with_mask]


def test_per_step_binary_gives_one_row_per_observed_step(root: Path, tmp_path: Path) -> None:
    s = _series()
    rows = predict_file(root, "steps", _write_csv(tmp_path / "s.csv", s), tmp_path / "out.csv")
    assert len(rows) == int(s.mask.sum()) == 9
    assert [(r["series"], r["time"]) for r in rows] == [
        (s.ids[i], float(s.t[i, j])) for i in range(3) for j in range(4) if s.mask[i, j]]
    assert all(set(r) == {"series", "time", "prediction", "probability"} for r in rows)
    assert all(r["prediction"] == int(r["probability"] > 0.5) and 0 < r["probability"] < 1 for r in rows)
    assert (tmp_path / "out.csv").read_text().splitlines()[0] == "series,time,prediction,probability"


def test_regression_gives_one_column_per_output(root: Path, tmp_path: Path) -> None:
    rows = predict_file(root, "reg", _write_npz(tmp_path / "s.npz", _series()), None)
    assert [set(r) for r in rows] == [{"series", "y_0", "y_1"}] * 3
    assert all(np.isfinite([r["y_0"], r["y_1"]]).all() for r in rows)


def test_version_argument_and_missing_version(root: Path, tmp_path: Path) -> None:
    path = _write_npz(tmp_path / "s.npz", _series())
    assert predict_file(root, "toy", path, None, version=1) == predict_file(root, "toy", path, None)
    _, meta, info = load_registered(tracking.tracking_uri(root), "reg")
    assert (info.name, info.version, info.family, meta.task) == ("ctsweep-reg", 1, "cfc", "regression")
    with pytest.raises(CtsweepError, match=r"'ctsweep-toy' has no version 7 \(versions: \[1\]\)"):
        predict_file(root, "toy", path, None, version=7)


def test_no_registered_model_or_no_champion_names_ctsweep_promote(root: Path, tmp_path: Path) -> None:
    path = _write_npz(tmp_path / "s.npz", _series())
    with pytest.raises(CtsweepError, match=r"no registered model 'ctsweep-nothing'.*run `ctsweep promote`"):
        predict_file(root, "nothing", path, tmp_path / "out.csv")
    with pytest.raises(CtsweepError, match=r"'ctsweep-bare' has no alias 'champion'.*`ctsweep promote`"):
        predict_file(root, "bare", path, tmp_path / "out.csv")
    assert not (tmp_path / "out.csv").exists()


def test_no_store_names_ctsweep_promote_and_creates_none(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    path = _write_npz(tmp_path / "s.npz", _series())
    with pytest.raises(CtsweepError, match=r"no MLflow store at .*mlflow\.db.*run `ctsweep promote`"):
        predict_file(tmp_path, "toy", path, None)
    assert not (tmp_path / "mlflow.db").exists()


def _npz(**arrays: np.ndarray):
    def write(path: Path) -> None:
        np.savez(path, **arrays)
    return write


def _text(text: str):
    def write(path: Path) -> None:
        path.write_text(text)
    return write


_S = _series()
_T_BACK = _S.t.copy()
_T_BACK[0, 2] = 0.1
_T_INF = _S.t.copy()
_T_INF[1, 0] = np.inf
_GAP = _S.mask.copy()
_GAP[0, 1] = False

BAD = {  # name: (file name, writer, what the message says)
    "suffix": ("s.json", _text("{}"), r"unknown file type '\.json'; allowed: \.npz, \.csv"),
    "empty_npz": ("s.npz", _text(""), r"empty file"),
    "empty_csv": ("s.csv", _text(""), r"empty file"),
    "header_only": ("s.csv", _text("series,time,a,b\n"), r"empty file: a header but no rows"),
    "not_a_zip": ("s.npz", _text("garbage"), r"not a readable \.npz file"),
    "not_text": ("s.csv", lambda path: path.write_bytes(b"\xc3\x28series,time\n"), r"not a readable UTF-8 CSV"),
    "utf16": ("s.csv", lambda path: path.write_bytes(b"\xff\xfe\x00series"), r"UTF-16 text .*allowed: UTF-8"),
    "missing_x": ("s.npz", _npz(t=_S.t), r"missing array 'x'"),
    "missing_t": ("s.npz", _npz(x=_S.x), r"missing array 't'"),
    "channels": ("s.npz", _npz(x=_S.x[..., :1], t=_S.t),
                 re.escape("x has 1 channels; the model expects 2 = ['a', 'b']")),
    "x_rank": ("s.npz", _npz(x=_S.x[..., 0], t=_S.t), r"x has shape \(3, 4\); expected \(N, L, C\)"),
    "t_shape": ("s.npz", _npz(x=_S.x, t=_S.t[:, :3]), r"t has shape \(3, 3\); expected \(N, L\) = \(3, 4\)"),
    "mask_shape": ("s.npz", _npz(x=_S.x, t=_S.t, mask=_S.mask[:2]), r"mask has shape \(2, 4\)"),
    "mask_gap": ("s.npz", _npz(x=_S.x, t=_S.t, mask=_GAP), r"observed step after padding"),
    "decreasing": ("s.npz", _npz(x=_S.x, t=_T_BACK, mask=_S.mask),
                   r"series '0' has decreasing times \(0\.5 then 0\.1 at step 2\)"),
    "non_finite": ("s.npz", _npz(x=_S.x, t=_T_INF, mask=_S.mask), r"series '1' has a non-finite time \(inf\)"),
    "duplicate_ids": ("s.npz", _npz(x=_S.x, t=_S.t, ids=np.array(["a", "b", "a"])), r"id 'a' appears twice"),
    "missing_column": ("s.csv", _text("series,time,a\ns1,0,1\n"), r"missing columns \['b'\]"),
    "unknown_column": ("s.csv", _text("series,time,a,b,c\ns1,0,1,2,3\n"),
                       re.escape("unknown columns ['c']; allowed columns: ['series', 'time', 'a', 'b']")),
    "csv_non_finite": ("s.csv", _text("series,time,a,b\ns1,0,1,2\ns1,nan,1,2\n"), r"series 's1' has a non-finite"),
    "csv_empty_time": ("s.csv", _text("series,time,a,b\ns1,,1,2\n"), r"line 2, column 'time': '' is not a number"),
    "csv_text_value": ("s.csv", _text("series,time,a,b\ns1,0,high,2\n"), r"line 2, column 'a': 'high'"),
    "csv_short_row": ("s.csv", _text("series,time,a,b\ns1,0,1\n"), r"line 2 has 3 fields; the header has 4"),
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_input_raises_data_error_naming_the_file(case: str, root: Path, tmp_path: Path) -> None:
    name, write, message = BAD[case]
    path = tmp_path / name
    write(path)
    out = tmp_path / "out.csv"
    with pytest.raises(DataError, match=re.escape(str(path)) + ".*" + message):
        predict_file(root, "toy", path, out)
    assert not out.exists()
    assert [p.name for p in tmp_path.iterdir()] == [name]  # not even a temporary file


# ------------------------------------------------------------------ refusals and warnings (issue 14, part 5)


def _with(x_edit: dict[tuple[int, int, int], float], n_copies: int = 1) -> Series:
    """_series() tiled `n_copies` times (ids s1, s2, s3, s1-1, ...), with x[i, j, c] = v for each edit."""
    s = _series()
    x, t, mask = (np.concatenate([a] * n_copies) for a in (s.x, s.t, s.mask))
    ids = [name if k == 0 else f"{name}-{k}" for k in range(n_copies) for name in s.ids]
    for (i, j, c), v in x_edit.items():
        x[i, j, c] = v
    return Series(ids, x, t, mask)


def _all_missing(s: Series, rows: list[int]) -> Series:
    x = s.x.copy()
    x[rows] = np.nan
    return Series(s.ids, x, s.t, s.mask)


def test_series_without_any_value_are_refused_by_id_with_a_count(root: Path, tmp_path: Path) -> None:
    s = _all_missing(_with({}, n_copies=3), rows=[0, 2, 3, 4, 5, 6, 8])  # 7 of 9 series
    path, out = _write_npz(tmp_path / "s.npz", s), tmp_path / "out.csv"
    with pytest.raises(DataError) as err:
        predict_file(root, "toy", path, out)
    message = str(err.value)
    assert message.startswith(f"{path}: refused, nothing was predicted: no value at all")
    assert "7 of 9 series ('s1', 's3', 's1-1', 's2-1', 's3-1' and 2 more)" in message
    assert "\n" not in message and not out.exists()


def test_all_missing_series_in_a_csv_and_an_npz_without_mask_are_refused(root: Path, tmp_path: Path) -> None:
    csv_path = tmp_path / "s.csv"
    csv_path.write_text("series,time,a,b\nok,0,1,2\nempty,0,,\nempty,1,,\n")
    with pytest.raises(DataError, match=r"no value at all .* in 1 of 2 series \('empty'\)"):
        predict_file(root, "toy", csv_path, None)
    s = _all_missing(_series(), rows=[1])
    bare = tmp_path / "bare.npz"
    np.savez(bare, x=s.x, t=s.t)  # the default mask of an all-NaN row is empty
    with pytest.raises(DataError, match=r"no value at all .* in 1 of 3 series \('1'\)"):
        predict_file(root, "toy", bare, None)


def test_infinite_values_are_refused_per_series(root: Path, tmp_path: Path) -> None:
    s = _with({(0, 0, 1): np.inf, (2, 1, 0): -np.inf})
    with pytest.raises(DataError, match=r"infinite values .* in 2 of 3 series \('s1', 's3'\)"):
        predict_file(root, "toy", _write_npz(tmp_path / "s.npz", s), None)
    too_big = tmp_path / "s.csv"  # 1e39 does not fit a float32; 3e38 does, but not once divided by b's std 0.5
    too_big.write_text("series,time,a,b\nx,0,1e39,2\ny,0,1,2\nz,0,1,3e38\n")
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # no numpy overflow warning on the way
        with pytest.raises(DataError, match=r"beyond float32's range .* in 2 of 3 series \('x', 'z'\)"):
            predict_file(root, "toy", too_big, None)


def test_values_far_outside_the_training_range_warn_once_and_still_predict(
        root: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    s = _with({(1, 0, 0): 1001.0, (1, 1, 1): -40.0, (2, 0, 1): 4.0})  # a: mean 1, std 2; b: mean -2, std 0.5
    path, out = _write_npz(tmp_path / "s.npz", s), tmp_path / "out.csv"
    rows = predict_file(root, "toy", path, out)
    assert [r["series"] for r in rows] == s.ids and out.exists()
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"ctsweep: warning: {path}: 3 value(s) in 2 of 3 series ('s2', 's3') lie more "
                               f"than 10 training standard deviations")
    assert "worst: series 's2', channel 'a' = 1001, 500 standard deviations" in lines[0]


def test_the_far_outside_threshold_is_ten_standard_deviations(root: Path, tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    def one_series(a: float, b: float) -> Path:  # a: mean 1, std 2; b: mean -2, std 0.5
        x = np.array([[[1.0, -2.0], [a, b]]], np.float32)
        path = tmp_path / f"{a}_{b}.npz"
        np.savez(path, x=x, t=np.array([[0.0, 1.0]], np.float32))
        return path

    predict_file(root, "toy", one_series(1 + 2 * 9.9, -2 - 0.5 * 9.9), None)
    assert capsys.readouterr().err == ""
    predict_file(root, "toy", one_series(1 + 2 * 10.1, -2.0), None)
    assert "1 value(s) in 1 of 1 series ('0')" in capsys.readouterr().err


def test_non_finite_model_output_is_refused_per_series() -> None:
    s = _series()
    output = np.array([[0.2, 0.3, 0.5], [np.nan, 0.5, 0.5], [0.1, 0.1, 0.8]])
    with pytest.raises(DataError, match=r"s\.npz: refused.*not finite for 1 of 3 series \('s2'\)"):
        _check_output(Path("s.npz"), s, METAS["toy"], output)
    per_step = np.full((3, 4), 0.5)
    per_step[1, 3] = np.nan  # padding of s2 (length 2): never shown, so not refused
    _check_output(Path("s.npz"), s, METAS["steps"], per_step)


def test_token_ids_must_be_whole_numbers_below_the_vocabulary_size() -> None:
    meta = Meta(name="tok", task="binary", per_step=False, output_size=1, metric="accuracy", channels=["token"],
                source="hand-made", norm_mean=[0.0], norm_std=[1.0], vocab_size=50, embedding_size=4)
    x = np.array([[[3.0], [49.0]], [[2.5], [1.0]], [[50.0], [np.nan]]], np.float32)
    s = Series(["a", "b", "c"], x, np.zeros((3, 2), np.float32), np.ones((3, 2), bool))
    with pytest.raises(DataError, match=r"whole numbers in 0 \.\. 49 in 2 of 3 series \('b', 'c'\)"):
        screen(Path("t.npz"), s, meta)
    assert screen(Path("t.npz"), Series(["a"], x[:1], s.t[:1], s.mask[:1]), meta) is None  # ids are not scaled


def test_pyfunc_takes_the_long_table_and_the_padded_arrays_alike(root: Path, tmp_path: Path) -> None:
    s = _series()
    model = mlflow.pyfunc.load_model(f"models:/{registered_name('toy')}@champion")
    frame = pd.read_csv(_write_csv(tmp_path / "s.csv", s))
    from_table = model.predict(frame)
    from_arrays = model.predict({"x": s.x, "t": s.t, "mask": s.mask})
    np.testing.assert_allclose(from_table, from_arrays, rtol=1e-6)
    with pytest.raises(ValueError, match=r"lacks columns \['b'\]"):
        model.predict(frame.drop(columns=["b"]))
