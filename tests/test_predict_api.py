"""The Python API (the registered pyfunc model) and `ctsweep predict` agree (issue 31, item 1): the
same refusals and warnings from the same screening, the same labels, and a model that documents
its inputs (original units, channels, static channels) and the label of each output column.

Real models in a real MLflow store in a temp folder (tests/test_predict.py's `store`).
"""

from __future__ import annotations

import re
import warnings
from pathlib import Path

import mlflow
import numpy as np
import pandas as pd
import pytest
from mlflow.models import Model
from mlflow.tracking import MlflowClient

from pipeline.config import PromoteParams
from pipeline.data.contract import Meta
from pipeline.errors import DataError
from pipeline.registry.promote import promote_dataset
from pipeline.serving.outputs import describe, label_map
from pipeline.serving.predict import predict_file
from pipeline.serving.pyfunc import ExtrapolationWarning
from pipeline.serving.screening import FAR_SIGMAS, REFUSE_SIGMAS
from pipeline.stores import tracking
from pipeline.stores.tracking import registered_name
from tests.test_predict import METAS, _series, _write_csv, _write_npz, root, store  # noqa: F401 (fixtures)


def _model(name: str = "toy"):
    return mlflow.pyfunc.load_model(f"models:/{registered_name(name)}@champion")


def _arrays(x: np.ndarray, t: np.ndarray | None = None) -> dict[str, np.ndarray]:
    s = _series()
    return {"x": x, "t": s.t if t is None else t, "mask": s.mask}


def _body(message: str, prefix: str) -> str:
    assert message.startswith(prefix), message
    return message[len(prefix):]


def _standardised() -> tuple[np.ndarray, np.ndarray]:
    z = np.random.default_rng(0).normal(size=(40, 6, 2)).astype(np.float32)
    return z, np.tile(np.arange(6, dtype=np.float32), (40, 1))


def _bad_inputs() -> dict[str, tuple[np.ndarray, np.ndarray, np.ndarray | None]]:
    s = _series()
    far = s.x.copy()
    far[1, 0, 0] = 1e30
    empty = s.x.copy()
    empty[2] = np.nan
    z, t = _standardised()
    return {"complex": (s.x.astype(np.complex128), s.t, s.mask), "beyond": (far, s.t, s.mask),
            "no_values": (empty, s.t, s.mask), "standardised": (z, t, None)}


@pytest.mark.parametrize("case", ["complex", "beyond", "no_values", "standardised"])
def test_the_api_refuses_what_the_cli_refuses_with_the_same_words(case: str, root: Path, tmp_path: Path) -> None:
    x, t, mask = _bad_inputs()[case]
    path = tmp_path / "s.npz"  # no ids: the CLI names series "0", "1", ... as the API does
    np.savez(path, x=x, t=t, **({} if mask is None else {"mask": mask}))
    with pytest.raises(DataError) as cli:
        predict_file(root, "toy", path, None)
    with pytest.raises(DataError) as api:
        _model().predict({"x": x, "t": t, **({} if mask is None else {"mask": mask})})
    assert _body(str(api.value), "model input: ") == _body(str(cli.value), f"{path}: ")
    assert "\n" not in str(api.value)


def test_the_long_table_is_refused_alike_and_names_its_series(root: Path, tmp_path: Path) -> None:
    s = _series()
    x = s.x.copy()
    x[2, 1, 1] = -1e30
    path = _write_csv(tmp_path / "s.csv", type(s)(s.ids, x, s.t, s.mask))
    with pytest.raises(DataError, match=re.escape(f"{path}: refused") + r".* in 1 of 3 series \('s3'\)"):
        predict_file(root, "toy", path, None)
    with pytest.raises(DataError, match=r"^model input: refused.* in 1 of 3 series \('s3'\)"):
        _model().predict(pd.read_csv(path))
    frame = pd.read_csv(_write_csv(tmp_path / "ok.csv", s))
    with pytest.raises(DataError, match=r"column 'a' has dtype complex128; expected real numbers"):
        _model().predict(frame.assign(a=frame["a"].astype(np.complex128)))


def test_the_api_warns_with_the_line_the_cli_prints(root: Path, tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    s = _series()
    x = s.x.copy()
    x[0, 0, 0] = 1.0 + 2.0 * 500  # channel a, 500 std out: predicted, flagged
    path = tmp_path / "s.npz"
    np.savez(path, x=x, t=s.t, mask=s.mask)
    predict_file(root, "toy", path, None)
    printed = capsys.readouterr().err.splitlines()
    assert len(printed) == 1
    with pytest.warns(ExtrapolationWarning) as caught:
        _model().predict({"x": x, "t": s.t, "mask": s.mask})
    [warning] = [w for w in caught if w.category is ExtrapolationWarning]
    assert _body(str(warning.message), "model input: ") == _body(printed[0], f"ctsweep: warning: {path}: ")
    assert "2 value(s) in 2 of 3 series ('0', '1')" in printed[0]  # s2's b = 4 is 12 std out too


@pytest.mark.parametrize("name", ["toy", "steps", "reg"])
def test_the_table_output_is_what_the_cli_returns(name: str, root: Path, tmp_path: Path) -> None:
    s = _series()
    path = _write_csv(tmp_path / "s.csv", s)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ExtrapolationWarning)  # _series' b = 4 is 12 std out
        rows = predict_file(root, name, path, None)
        table = _model(name).predict(pd.read_csv(path), params={"output": "table"})
    assert isinstance(table, pd.DataFrame)
    assert table.to_dict("records") == rows
    if name == "toy":  # labels, not indices
        assert list(table["prediction"]) == [r["prediction"] for r in rows]
        assert set(table["prediction"]) <= {"low", "mid", "high"}


def test_probability_columns_map_to_the_labels_the_cli_prints(root: Path, tmp_path: Path) -> None:
    s = _series()
    model = _model()
    classes = model.metadata.metadata["classes"]
    assert classes == ["low", "mid", "high"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ExtrapolationWarning)
        probs = model.predict({"x": s.x, "t": s.t, "mask": s.mask})  # (N, 3), column k is classes[k]
        rows = predict_file(root, "toy", _write_npz(tmp_path / "s.npz", s), None)
    assert [classes[k] for k in probs.argmax(axis=1)] == [r["prediction"] for r in rows]
    with pytest.raises(Exception, match=r"output 'labels' is not one of \['probabilities', 'table'\]"):
        model.predict({"x": s.x, "t": s.t, "mask": s.mask}, params={"output": "labels"})


def test_the_model_documents_units_channels_and_labels(root: Path) -> None:
    uri = f"models:/{registered_name('toy')}@champion"
    info = Model.load(uri)
    meta = info.metadata
    assert meta["input_units"] == "original" and meta["channels"] == ["a", "b"] and meta["static_channels"] == []
    assert meta["classes"] == ["low", "mid", "high"] and meta["outputs"] == ["probabilities", "table"]
    assert (meta["warn_beyond_std"], meta["refuse_beyond_std"]) == (FAR_SIGMAS, REFUSE_SIGMAS)
    assert meta["description"].startswith("Input: series in original units, as in the raw data, NOT the "
                                          "standardised data/processed splits")
    assert "channels in order: ['a', 'b']; no static channels" in meta["description"]
    assert "column k the class labelled ['low', 'mid', 'high'][k]" in meta["description"]
    assert info.signature.params.to_dict() == [{"name": "output", "type": "string", "default": "probabilities",
                                                "shape": None}]


def test_static_channels_binary_labels_and_tokens_are_described() -> None:
    meta = Meta(name="icu", task="binary", per_step=True, output_size=1, metric="auroc", source="hand-made",
                channels=["hr", "sbp", "age", "gender"], static_channels=["age", "gender"],
                classes=["survived", "died"], norm_mean=[0.0] * 4, norm_std=[1.0] * 4)
    text = describe(meta, FAR_SIGMAS, REFUSE_SIGMAS)
    assert "channels in order: ['hr', 'sbp'], then static channels (one value per series, repeated at each " \
           "step): ['age', 'gender']" in text
    assert "Output per step (an L axis after N): (N,) P(class 'died'); the prediction is 'died' above 0.5, " \
           "else 'survived'" in text
    assert label_map(meta) == ["survived", "died"]
    tokens = Meta(name="imdb", task="binary", per_step=False, output_size=1, metric="accuracy", source="x",
                  channels=["token"], norm_mean=[0.0], norm_std=[1.0], vocab_size=100, embedding_size=4)
    assert "series in token ids" in describe(tokens, FAR_SIGMAS, REFUSE_SIGMAS)


def test_promote_writes_the_description_into_the_registered_model(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.test_promote import DATASET, _final

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    _final(tmp_path, "cfc", 0.8)
    assert promote_dataset(tmp_path, DATASET, ["cfc"], PromoteParams())["alias_moved"]
    model = MlflowClient(tracking.tracking_uri(tmp_path)).get_registered_model(registered_name(DATASET))
    assert model.description.startswith(f"ctsweep: the best model found for {DATASET}. Input: series in original "
                                         f"units")
    assert "channels in order: ['a', 'b']; no static channels" in model.description
    assert "column k the class labelled ['0', '1', '2'][k]" in model.description
