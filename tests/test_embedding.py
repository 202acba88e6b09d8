"""Token datasets: every raw family trains behind a learned embedding; the others are refused."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
import torch

from pipeline.data.contract import Dataset, Meta, Split, save_dataset
from pipeline.errors import ConfigError
from pipeline.serving.pyfunc import load_checkpoint, save_checkpoint
from pipeline.training.loop import Trainer, TrainSettings, build_model

VOCAB, EMB = 50, 6


def token_dataset(n: int = 48, length: int = 12) -> Dataset:
    """Label = whether token 7 occurs: a model must look at the ids, not their size."""
    rng = np.random.default_rng(0)
    lengths = rng.integers(3, length + 1, n)
    mask = np.arange(length)[None, :] < lengths[:, None]
    ids = rng.integers(3, VOCAB, (n, length)).astype(np.float32)
    y = (rng.random(n) < 0.5).astype(np.int64)
    ids[y == 1, 0] = 7
    ids[(y == 0)[:, None] & (ids == 7)] = 8
    x = np.where(mask, ids, np.nan)[..., None].astype(np.float32)
    t = np.where(mask, np.arange(length, dtype=np.float32), (lengths - 1)[:, None]).astype(np.float32)
    split = Split(x, t, mask, y)
    meta = Meta(name="tokens", task="binary", per_step=False, output_size=1, metric="accuracy", channels=["token"],
                source="test", norm_mean=[0.0], norm_std=[1.0], vocab_size=VOCAB, embedding_size=EMB)
    return Dataset(meta, {"train": split, "val": split, "test": split})


def test_raw_family_reads_the_embedding_and_round_trips_a_checkpoint(tmp_path: Path) -> None:
    data = token_dataset()
    kwargs = {"hidden_size": 8, "backbone_units": 8, "backbone_layers": 1}
    trainer = Trainer("cfc", kwargs, TrainSettings(lr=1e-2, batch_size=16), data, seed=0)
    assert trainer.model.embedding.weight.shape == (VOCAB, EMB)
    assert trainer.model.inner.input_channels == EMB
    before = trainer.model.embedding.weight.detach().clone()
    trainer.run_epoch()
    assert not torch.equal(before, trainer.model.embedding.weight)  # the embedding learns
    assert trainer.model.num_parameters() == VOCAB * EMB + trainer.model.inner.num_parameters()
    path = tmp_path / "ckpt.pt"
    save_checkpoint(path, "cfc", kwargs, 1, trainer.model.state_dict(), data.meta)
    model, meta, _ = load_checkpoint(path)
    batch = {k: v[:5] for k, v in trainer.inputs["test"].items()}
    trainer.model.eval()
    with torch.no_grad():
        assert torch.allclose(model(**batch), trainer.model(**batch))


def test_ids_not_magnitudes_reach_the_family() -> None:
    data = token_dataset()
    model = build_model("lstm_dt", data.meta, 1, {"hidden_size": 4})
    with torch.no_grad():
        model.embedding.weight.zero_()  # every id maps to the same vector ...
        inputs = {"x": torch.tensor([[[3.0], [40.0]]]), "dt": torch.ones(1, 2), "mask": torch.ones(1, 2, dtype=torch.bool)}
        other = {**inputs, "x": torch.tensor([[[9.0], [11.0]]])}
        assert torch.equal(model(**inputs), model(**other))  # ... so the ids' size cannot matter


@pytest.mark.parametrize("family", ["ncde", "nrde", "gru_d"])
def test_families_with_prebuilt_inputs_are_refused(family: str, tmp_path: Path) -> None:
    data = token_dataset()
    with pytest.raises(ConfigError, match=rf"{family}.*tokens.*embedding.*'cfc'"):
        build_model(family, data.meta, 1, {})
    save_dataset(tmp_path / "data" / "processed" / "tokens", data)
    from pipeline.config import SearchParams
    from pipeline.sweep.search import search

    (tmp_path / "search_spaces").mkdir()
    with pytest.raises(ConfigError, match=family):
        search(tmp_path, "tokens", family, SearchParams())
    assert not (tmp_path / "mlflow.db").exists()  # refused before anything was started


def test_meta_without_tokens_is_unchanged() -> None:
    meta = dataclasses.replace(token_dataset().meta, vocab_size=0, embedding_size=0)
    model = build_model("cfc", meta, 3, {"hidden_size": 4, "backbone_units": 4, "backbone_layers": 1})
    assert model.input_channels == 3 and not hasattr(model, "embedding")
