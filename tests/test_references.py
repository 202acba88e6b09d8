"""The shipped paper figures: they load, and every name matches a dataset and a family of ours."""

from __future__ import annotations

import pytest

from pipeline.config import load_params
from pipeline.data.contract import METRIC_MODES
from pipeline.models import MODELS
from pipeline.references import load_references
from tests.conftest import REPO


def test_shipped_references_name_known_datasets_families_and_sources() -> None:
    refs = load_references(REPO)
    prepare = load_params(REPO / "params.yaml").prepare
    assert len(refs.figures) >= 10
    for f in refs.figures:
        assert f.dataset in prepare and f.family in MODELS and f.metric in METRIC_MODES, f
        assert f.where and refs.sources[f.source].citation
    [cfc] = [f for f in refs.for_pair("xor_event", "cfc")]  # the figure the issue quotes
    mean, std = cfc.as_fraction()
    assert mean == pytest.approx(0.9942) and std == pytest.approx(0.0042)
