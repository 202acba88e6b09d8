"""The shipped paper figures: they load, every name matches a dataset, a family and a table of its
source, a few values are the ones read in the papers, and the loader's checks name what is wrong."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from pipeline.config import load_params
from pipeline.data.contract import METRIC_MODES
from pipeline.errors import ConfigError
from pipeline.models import MODELS
from pipeline.reporting.references import Figure, References, load_references
from tests.conftest import REPO

# The numbering of each source's result tables (and text sections with figures), as printed in the
# papers; a `where` outside these names a table the paper does not have.
PAPER_TABLES = {
    "cfc2021": {"Table 4", "Table 5", "Table 6", "Table 7"},
    "irie2022": {"Table 1", "Table 2"},
    "anumasa_cdrnde": {"Table 3", "Table 4", "Table 5", "Table 6", "Table 7"},
    "kohan2022": {f"Table {n}" for n in range(1, 9)},
    "neuralwave2025": {"Table 1", "Table 2", "Sec. 5.1"},
}

# (source, dataset, family, metric, where starts with, mean, std, unit) as printed in the paper
# texts and checked there by hand when the rows were written.
VERIFIED = [
    ("irie2022", "speech_commands", "cde_fwp_delta", "accuracy", "Table 1", 90.2, 0.2, "percent"),
    ("irie2022", "speech_commands", "gru_ode", "accuracy", "Table 1", 47.9, 2.9, "percent"),
    ("irie2022", "sepsis", "cde_fwp_hebb", "auroc", "Table 1", 85.7, 0.3, "percent"),
    ("irie2022", "sepsis_intensity", "node_fwp_hebb", "auroc", "Table 1", 90.4, 0.4, "percent"),
    ("irie2022", "eigenworms", "rde_node_fwp_delta", "accuracy", "Table 2, Sig-Depth 1", 91.8, 3.4, "percent"),
    ("irie2022", "eigenworms", "rde_node_fwp_delta", "accuracy", "Table 2, Sig-Depth 2", 87.7, 1.9, "percent"),
    ("irie2022", "eigenworms", "nrde", "accuracy", "Table 2, Sig-Depth 1", 66.7, 11.8, "percent"),
    ("anumasa_cdrnde", "person_activity", "lstm_dt", "accuracy", "Table 3", 83.78, 0.41, "percent"),
    ("anumasa_cdrnde", "person_activity", "cdr_nde", "accuracy", "Table 3", 87.54, 0.34, "percent"),
    ("anumasa_cdrnde", "walker2d", "cdr_nde_heat", "mse", "Table 3", 0.49, 0.01, "raw"),
    ("anumasa_cdrnde", "walker2d", "ode_rnn", "mse", "Table 3", 1.88, 0.05, "raw"),
    ("kohan2022", "physionet2012", "latent_ode_tw", "auroc", "Table 1(a)", 0.861, None, "fraction"),
    ("kohan2022", "physionet2012", "gru_d", "auroc", "Table 6", 0.863, None, "fraction"),
    ("kohan2022", "sepsis_hourly", "ncde_tw", "auroc", "Table 5", 0.931, None, "fraction"),
    ("kohan2022", "person_activity_rubanova", "latent_ode", "accuracy", "Table 3", 0.846, None, "fraction"),
]
VERIFIED_OTHER_TASKS = [
    ("kohan2022", "physionet2012", "latent_ode", "mse", "Table 1(b), top", 2.280, None, "x1e-3"),
]


@pytest.fixture(scope="module")
def refs() -> References:
    return load_references(REPO)


def _all(refs: References) -> list[Figure]:
    return [*refs.figures, *refs.other_tasks]


def _key(f: Figure) -> tuple:
    return (f.source, f.dataset, f.family, f.metric)


def test_shipped_references_name_known_datasets_families_and_sources(refs: References) -> None:
    prepare = load_params(REPO / "params.yaml").prepare
    assert len(refs.figures) >= 10 and refs.other_tasks
    for f in _all(refs):
        assert f.dataset in prepare and f.family in MODELS and f.metric in METRIC_MODES, f
        assert f.source in refs.sources and refs.sources[f.source].citation, f
    [cfc] = [f for f in refs.for_pair("xor_event", "cfc")]  # the figure the issue quotes
    mean, std = cfc.as_fraction()
    assert mean == pytest.approx(0.9942) and std == pytest.approx(0.0042)


def test_every_where_names_a_table_of_its_source(refs: References) -> None:
    papers = {f.source for f in _all(refs)}
    assert papers <= set(PAPER_TABLES)
    # every other source is a results file behind a published_best entry (read line by line: no tables)
    assert set(refs.sources) - papers == {b.source for b in refs.published_best.values()}
    for key, src in ((k, refs.sources[k]) for k in sorted(papers)):
        assert src.tables and {re.match(r"Table \d+|Sec\. [\d.]+", t)[0] for t in src.tables} <= PAPER_TABLES[key]
    for f in _all(refs):
        label = re.match(r"(Table \d+|Sec\. \d+(\.\d+)*)(?![\d.])", f.where)
        assert label and label[1] in PAPER_TABLES[f.source], f


@pytest.mark.parametrize("row", VERIFIED, ids=lambda r: f"{r[0]}-{r[1]}-{r[2]}-{r[4]}")
def test_verified_figures_are_shown_with_the_printed_values(refs: References, row: tuple) -> None:
    source, dataset, family, metric, where, mean, std, unit = row
    hits = [(f.mean, f.std, f.unit) for f in refs.for_pair(dataset, family)
            if (f.source, f.metric) == (source, metric) and f.where.startswith(where)]
    assert (mean, std, unit) in hits  # cdr_nde_heat has two rows per table column (Euler, dopri5)


@pytest.mark.parametrize("row", VERIFIED_OTHER_TASKS, ids=lambda r: f"{r[0]}-{r[1]}-{r[2]}")
def test_other_task_figures_are_kept_but_never_compared(refs: References, row: tuple) -> None:
    source, dataset, family, metric, where, mean, std, unit = row
    hits = [f for f in refs.other_tasks
            if _key(f) == (source, dataset, family, metric) and f.where.startswith(where)]
    assert [(f.mean, f.std, f.unit) for f in hits] == [(mean, std, unit)] and hits[0].task
    assert not [f for f in refs.for_pair(dataset, family) if f.where == hits[0].where]


def test_per_hour_sepsis_and_rubanova_activity_sit_beside_their_own_tasks_only(refs: References) -> None:
    """The temporal weights paper's sepsis (every hour) and human activity (Rubanova's 12 coordinates)
    join sepsis_hourly and person_activity_rubanova, never our per-stay sepsis or ODE-LSTM's windows."""
    for dataset in ("sepsis", "sepsis_intensity", "person_activity"):
        for family in MODELS:
            assert all(f.source != "kohan2022" for f in refs.for_pair(dataset, family)), (dataset, family)
    assert {f.source for f in refs.for_pair("sepsis_hourly", "ode_rnn_tw")} == {"kohan2022"}
    assert {f.source for f in refs.for_pair("person_activity_rubanova", "latent_ode_tw")} == {"kohan2022"}


def test_cdr_nde_table_3_is_credited_to_the_cdr_nde_paper(refs: References) -> None:
    for dataset in ("person_activity", "walker2d"):
        for family in ("cdr_nde", "cdr_nde_heat"):
            sources = {f.source for f in refs.for_pair(dataset, family)}
            assert sources == {"anumasa_cdrnde"}, (dataset, family, sources)


def test_scaled_units_convert_to_the_pipeline_scale(refs: References) -> None:
    [auc] = [f for f in refs.for_pair("sepsis", "cde_fwp_hebb") if f.source == "irie2022"]
    assert auc.as_fraction() == pytest.approx((0.857, 0.003))  # AUC printed x 10^2
    [mse] = [f for f in refs.other_tasks if f.where.startswith("Table 1(b), top") and f.family == "latent_ode"]
    assert mse.as_fraction() == (pytest.approx(0.00228), None)  # MSE printed x 10^-3


# --- the loader's checks on a hand-written file -------------------------------------------------

SOURCE = "sources:\n  p: {citation: 'A paper', tables: ['Table 1', 'Sec. 4']}\n"
ROW = "{dataset: d, family: f, metric: %s, mean: %s, unit: %s, source: p, where: '%s'}"


def _load(tmp_path: Path, text: str) -> References:
    (tmp_path / "references.yaml").write_text(text)
    return load_references(tmp_path)


def _error(tmp_path: Path, text: str) -> str:
    with pytest.raises(ConfigError) as err:
        _load(tmp_path, text)
    message = str(err.value)
    assert "\n" not in message and "references.yaml" in message
    return message


def test_loader_accepts_table_labels_with_a_suffix(tmp_path: Path) -> None:
    text = SOURCE + "figures:\n  - " + ROW % ("mse", 2.28, "x1e-3", "Table 1(b), top") + "\n"
    [f] = _load(tmp_path, text).figures
    assert f.as_fraction()[0] == pytest.approx(2.28e-3)


def test_loader_rejects_a_unit_that_does_not_fit_the_metric(tmp_path: Path) -> None:
    message = _error(tmp_path, SOURCE + "figures:\n  - " + ROW % ("auroc", 2.28, "x1e-3", "Table 1") + "\n")
    assert "key `figures.0.unit` = 'x1e-3'" in message and "allowed: percent, fraction" in message


def test_loader_rejects_an_unknown_unit(tmp_path: Path) -> None:
    message = _error(tmp_path, SOURCE + "figures:\n  - " + ROW % ("mse", 2.28, "x10^-2", "Table 1") + "\n")
    assert "key `figures.0.unit` = 'x10^-2'" in message and "'x1e-3'" in message


def test_loader_rejects_a_value_outside_the_metric_range(tmp_path: Path) -> None:
    message = _error(tmp_path, SOURCE + "figures:\n  - " + ROW % ("accuracy", 185.2, "percent", "Table 1") + "\n")
    assert "key `figures.0`" in message and "mean 185.2" in message and "[0, 1]" in message


def test_loader_rejects_a_where_outside_the_source_tables(tmp_path: Path) -> None:
    message = _error(tmp_path, SOURCE + "figures:\n  - " + ROW % ("accuracy", 85.2, "percent", "Table 12") + "\n")
    assert "figures.0.where 'Table 12' names no table of source 'p'" in message and "'Sec. 4'" in message


def test_other_tasks_need_a_task_and_figures_may_not_have_one(tmp_path: Path) -> None:
    row = ROW % ("auroc", 0.9, "fraction", "Table 1")
    message = _error(tmp_path, SOURCE + "figures: []\nother_tasks:\n  - " + row + "\n")
    assert "key `other_tasks.0.task`: Field required" in message
    message = _error(tmp_path, SOURCE + "figures:\n  - " + row[:-1] + ", task: hourly}\n")
    assert "key `figures.0.task` = 'hourly'" in message
