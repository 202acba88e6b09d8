"""The note a dataset with nothing to download leaves in data/raw/<dataset>/: where its data comes from.

dvc.yaml lists data/raw/<dataset> as the fetch stage's output and prepare's dependency, for every
dataset. One that is generated from its params (xor) or read from the copy an installed package
ships (the UEA/UCR sets aeon bundles, JapaneseVowels among them) has no raw file, and an empty
folder made DVC warn "'data/raw/<dataset>' is empty" four times per `dvc repro`, which no user
could act on. fetch writes this note instead, so the folder is never empty and its hash in
dvc.lock follows the data's real source:

    data/raw/japanese_vowels/SOURCE.txt
        japanese_vowels: nothing to download; prepare reads the copy the installed aeon ships:
        aeon/datasets/data/JapaneseVowels/JapaneseVowels_TEST.ts sha256 3f1c...
        aeon/datasets/data/JapaneseVowels/JapaneseVowels_TRAIN.ts sha256 9a0b...

An aeon release that changes a bundled file changes the note, so DVC reruns prepare and what
follows; one that leaves the files alone changes nothing. A generated dataset's note is a constant
line. The note is rewritten only when its text changes, and fetch never reports it as a raw file.
"""

from __future__ import annotations

import hashlib
import importlib.util
from pathlib import Path
from typing import Any

from pipeline.stores.files import write_text

NOTE = "SOURCE.txt"
SPLITS = ("TEST", "TRAIN")  # the bundled .ts files prepare reads (pipeline/data/kinds/uea.py, load_file_split)


def bundled_files(p: Any) -> list[Path] | None:
    """The files of the installed aeon that a `uea` dataset aeon ships is read from; None for any
    other dataset (or when aeon is not installed: prepare says so when it needs it)."""
    if getattr(p, "kind", None) != "uea":
        return None
    from pipeline.data.kinds.uea import BUNDLED

    spec = importlib.util.find_spec("aeon")  # found, not imported: aeon.datasets takes a second
    if p.name not in BUNDLED or spec is None or spec.origin is None:
        return None
    folder = Path(spec.origin).parent / "datasets" / "data" / p.name
    return [folder / f"{p.name}_{split}.ts" for split in SPLITS]


def note_text(dataset: str, p: Any) -> str:
    """The note for `dataset` (its params `p`): where prepare gets the data, and for a copy a
    package ships, each file's sha256 (or "missing")."""
    files = bundled_files(p)
    if files is None:
        return f"{dataset}: nothing to download; prepare builds it from params.yaml's prepare.{dataset}.\n"
    lines = [f"{dataset}: nothing to download; prepare reads the copy the installed aeon ships:"]
    for path in files:
        digest = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else "missing"
        lines.append(f"aeon/datasets/data/{path.parent.name}/{path.name} sha256 {digest}")
    return "\n".join(lines) + "\n"


def write_note(raw_dir: Path, dataset: str, p: Any) -> Path:
    """Write raw_dir/SOURCE.txt unless it already holds the same text; returns its path."""
    path = raw_dir / NOTE
    text = note_text(dataset, p)
    if not path.is_file() or path.read_text(encoding="utf-8") != text:
        write_text(path, text)
    return path
