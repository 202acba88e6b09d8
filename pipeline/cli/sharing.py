"""Which other datasets a stage takes on with its own (`search.share_datasets`, `final.share_datasets`).

`dvc repro` runs one search stage and one final stage per dataset, one after another, and in a
full repro every prepare stage before the first search (DVC runs the stages of a `foreach` in
dvc.yaml's order). So the first dataset's stage can take on the out-of-date families of the
others whose data is prepared, all in one Ray run, and their own stages, run next, find their
results current and finish in seconds. DVC still sees one stage per dataset with its own
outputs, and reruns only the stages of what changed; the stage that takes a sibling on writes
exactly the files that sibling's own stage would have written, from the same inputs.

A sibling whose data is not prepared yet (a repro of one target, or `dvc repro` on a fresh
clone running a dataset's stages depth-first) is simply left to its own stage.
"""

from __future__ import annotations

from pathlib import Path

from pipeline.stores.paths import processed_dir


def siblings(root: Path, datasets: list[str], dataset: str, share: bool) -> list[str]:
    """The datasets of params.yaml's `datasets` other than `dataset` whose processed data is
    there, in params.yaml's order; none when `share` is off."""
    if not share:
        return []
    return [name for name in datasets if name != dataset and (processed_dir(root, name) / "meta.json").is_file()]
