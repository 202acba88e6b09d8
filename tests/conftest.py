"""Shared fixtures: the real project files, copied into a temporary root and shrunk."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]


def write_params(root: Path, params: dict) -> Path:
    path = root / "params.yaml"
    path.write_text(yaml.safe_dump(params, sort_keys=False))
    return path


def default_params() -> dict:
    return yaml.safe_load((REPO / "params.yaml").read_text())


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A temporary project root with the real search spaces and params.yaml."""
    shutil.copytree(REPO / "search_spaces", tmp_path / "search_spaces")
    shutil.copy(REPO / "params.yaml", tmp_path / "params.yaml")
    return tmp_path
