"""The data's provenance note: one short line saying where a processed dataset falls short of the
publisher's data, carried from prepare to every result made from it.

    "local copy, not verified against the publisher (set-a.tar.gz, Outcomes-a.txt); 3,996 of 4,000 records"

It is built at prepare time from the raw files' marks in data/raw.lock (raw_lock.py: a copy used
with `--unverified-copy`) and the loader's own note (Meta.provenance as `build` returns it: records
its source lists but the copy lacks, or a caveat of the protocol itself such as Person Activity's
overlapping windows, pipeline/data/overlap.py), and kept in meta.json. Empty when every raw file was
verified and complete and the loader has nothing to say; then meta.json omits it, so a dataset prepared before the note existed keeps its bytes
(and the fingerprints of resumable searches and final stages built on them).

The search and final stages tag their MLflow runs with it (`data_provenance`) and write it into
their records; the report and the registered model's description show it.
"""

from __future__ import annotations

import dataclasses

from pipeline.data.contract import Dataset, Meta
from pipeline.stores.schema import DATA_PROVENANCE

UNVERIFIED_NOTE = "local copy, not verified against the publisher"


def describe(unverified: dict[str, str], loader_note: str = "") -> str:
    """The note from the unverified raw files {file name: why} and the loader's note (completeness)."""
    parts = []
    if unverified:
        parts.append(f"{UNVERIFIED_NOTE} ({', '.join(sorted(unverified))})")
    if loader_note:
        parts.append(loader_note)
    return "; ".join(parts)


def with_provenance(dataset: Dataset, unverified: dict[str, str]) -> Dataset:
    """`dataset` with its Meta.provenance completed by the raw files' marks."""
    note = describe(unverified, dataset.meta.provenance)
    if note == dataset.meta.provenance:
        return dataset
    return dataclasses.replace(dataset, meta=dataclasses.replace(dataset.meta, provenance=note))


def provenance_fields(meta: Meta) -> dict[str, str]:
    """{"data_provenance": note} for MLflow tags and result records; {} when the data is as published,
    so runs and records of verified data look as they always did."""
    return {DATA_PROVENANCE: meta.provenance} if meta.provenance else {}
