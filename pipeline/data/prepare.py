"""The `fetch` and `prepare` stages: raw files into data/raw/<dataset>/, then the processed dataset.

Each dataset kind is a module of this package exposing
    raw_files(params) -> list[RawFile]               what to download (empty: generated or bundled)
    build(name, params, raw_dir) -> Dataset          raw files (present and verified) -> splits
and is listed in KINDS under the `kind` its params.yaml section names. A kind whose raw files
are not downloads (`local`: the user's own files) also exposes
    fetch(p, raw_dir, lock_path, source) -> list[Path]   used instead of the download path

`allow_unverified` (`--unverified-copy`, CTSWEEP_UNVERIFIED_COPY): a mirror's copy that the
publisher's checksums cannot vouch for may be used, marked so in data/raw.lock (download.py);
prepare writes the marks, with the loader's own note, into meta.json's provenance (provenance.py).
"""

from __future__ import annotations

import importlib
from pathlib import Path
from types import ModuleType
from typing import Any

from pipeline.data.contract import Meta, save_dataset
from pipeline.data.download import fetch as fetch_files
from pipeline.data.provenance import with_provenance
from pipeline.data.raw_note import write_note
from pipeline.data.raw_lock import unverified_files
from pipeline.errors import ConfigError

# kind -> module name; imported on use, so preparing one dataset never imports another's libraries.
KINDS = {
    "xor": "xor",
    "uea": "uea",
    "speech_commands": "speech_commands",
    "sepsis": "sepsis",
    "physionet2012": "physionet2012",
    "person_activity": "person_activity",
    "walker2d": "walker2d",
    "imdb": "imdb",
    "local": "local",
}


def kind_module(kind: str) -> ModuleType:
    if kind not in KINDS:
        raise ConfigError(f"unknown dataset kind {kind!r}; valid: {sorted(KINDS)}")
    return importlib.import_module(f"pipeline.data.kinds.{KINDS[kind]}")


def fetch(p: Any, raw_dir: Path, lock_path: Path, source: str | None = None,
          allow_unverified: bool = False) -> list[Path]:
    """Download (or verify) every raw file of a dataset (its params `p`) into raw_dir; returns them.

    raw_dir always exists afterwards, so DVC can track it. A dataset with nothing to download
    (generated, or a copy a package ships) gets raw_dir/SOURCE.txt instead, saying where its data
    comes from (raw_note.py): DVC warns about an empty output folder, and the note's checksums make
    a changed bundled copy a changed output. The note is not among the returned files.
    """
    module = kind_module(p.kind)
    if hasattr(module, "fetch"):  # the user's own files: no publisher, so nothing to accept unverified
        return module.fetch(p, raw_dir, lock_path, source)
    files = module.raw_files(p)
    paths = fetch_files(files, raw_dir, lock_path, source, allow_unverified=allow_unverified)
    if not files:
        write_note(raw_dir, raw_dir.name, p)
    return list(paths.values())


def unverified_raw_files(p: Any, lock_path: Path) -> dict[str, str]:
    """{file name: why} of the dataset's raw files used unverified (their marks in data/raw.lock)."""
    module = kind_module(p.kind)
    if hasattr(module, "fetch"):
        return {}
    return unverified_files([(f.url, f.filename) for f in module.raw_files(p)], lock_path)


def prepare(name: str, p: Any, out_dir: Path, raw_dir: Path, lock_path: Path, source: str | None = None,
            allow_unverified: bool = False) -> Meta:
    """Fetch what is missing, build dataset `name` from its params and write it to out_dir atomically.

    Inputs listed under `precompute` (log-signature windows, spline coefficients) are built
    into out_dir/inputs/ in the same atomic write. meta.json's provenance says which raw files
    were used unverified and what the loader found missing (pipeline/data/provenance.py).
    """
    module = kind_module(p.kind)
    fetch(p, raw_dir, lock_path, source, allow_unverified)
    dataset = with_provenance(module.build(name, p, raw_dir), unverified_raw_files(p, lock_path))
    specs = getattr(p, "precompute", [])

    def write_inputs(folder: Path) -> None:
        from pipeline.data.inputs import precompute  # late: imports the model zoo

        for spec in specs:
            precompute(folder, dataset.splits, spec.family, spec.args)

    save_dataset(out_dir, dataset, extra=write_inputs if specs else None)
    return dataset.meta
