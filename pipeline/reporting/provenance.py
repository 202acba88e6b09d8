"""What produced a report: the git commit, the data and result hashes DVC recorded, the params,
and where the data falls short of the publisher's (an unverified local copy, missing records).

A table is only as good as the trace back to its inputs: the report prints these so anyone can
check out the same commit, `dvc checkout` the same data and rerun.
"""

from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path
from typing import Any, Callable

from pipeline.config import read_yaml
from pipeline.stores.schema import DATA_PROVENANCE


def git_commit(root: Path) -> str:
    """HEAD's hash, with " (uncommitted changes: <files>)" when tracked files differ; "not a git repository"."""
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, check=True).stdout.strip()

    try:
        head = git("rev-parse", "HEAD")
    except (OSError, subprocess.CalledProcessError):
        return "not a git repository (or no commit yet)"
    dirty = [f for f in git("diff", "HEAD", "--name-only").splitlines() if not _written_by_the_run(root, f, git)]
    if not dirty:
        return head
    shown = ", ".join(dirty[:5]) + (f" and {len(dirty) - 5} more" if len(dirty) > 5 else "")
    return f"{head} (uncommitted changes: {shown})"


# What the pipeline run itself writes into tracked files: `dvc repro` deletes the report's outputs
# before running it and updates dvc.lock stage by stage (its hashes are part of the stamp anyway);
# `fetch` records raw files' checksums in data/raw.lock (the data's hashes are in dvc.lock too).
RUN_WRITES = ("dvc.lock", "data/raw.lock")


def _written_by_the_run(root: Path, name: str, git: Callable[..., str]) -> bool:
    """Whether the change to tracked file `name` is the run's own bookkeeping, not the user's edit.

    Besides RUN_WRITES and reports/, DVC adds each output it creates to the .gitignore of its
    folder: a .gitignore whose every changed line is `/<name>` of a DVC output is DVC's.
    """
    if name in RUN_WRITES or name.startswith("reports/"):
        return True
    if Path(name).name != ".gitignore":
        return False
    changed = [line[1:] for line in git("diff", "HEAD", "-U0", "--", name).splitlines()
               if line[:1] in "+-" and not line.startswith(("+++", "---"))]
    folder = Path(name).parent
    outs = _dvc_outputs(root)
    return bool(changed) and all(line.startswith("/") and (folder / line[1:]).as_posix() in outs for line in changed)


def _dvc_outputs(root: Path) -> set[str]:
    """Every output path dvc.lock records (relative to the project root)."""
    lock_path = root / "dvc.lock"
    if not lock_path.exists():
        return set()
    lock = read_yaml(lock_path, max_bytes=64 << 20) or {}
    return {o["path"] for entry in (lock.get("stages") or {}).values() for o in entry.get("outs", [])}


def dvc_hashes(root: Path, stages: list[str], families: list[str] | None = None) -> dict[str, dict[str, str]]:
    """{stage: {output path: md5}} from dvc.lock for the named stages (those DVC has run).

    A results folder (the search and final stages write one per dataset, a file per family) is
    followed by the md5 of each of `families`' files in it as they are now, so a row of the
    table traces back to its own file."""
    lock_path = root / "dvc.lock"
    if not lock_path.exists():
        return {}
    lock = read_yaml(lock_path, max_bytes=64 << 20) or {}  # a big project's dvc.lock outgrows params' 1 MiB cap
    out: dict[str, dict[str, str]] = {}
    for stage in stages:
        entry = lock.get("stages", {}).get(stage)
        if entry:
            out[stage] = {o["path"]: o.get("md5", "?") for o in entry.get("outs", [])}
            for folder in [o["path"] for o in entry.get("outs", []) if o["path"].startswith("results/")]:
                for family in families or []:
                    path = root / folder / f"{family}.json"
                    if path.is_file():
                        out[stage][f"{folder}/{family}.json"] = hashlib.md5(path.read_bytes()).hexdigest()
    return out


def stages_of(datasets: list[str], families: list[str]) -> list[str]:
    """The dvc.lock stage names whose outputs the report reads, as dvc.yaml names them (one search
    and one final stage per dataset, holding every family: their outputs are folders; the
    classical reference's file)."""
    return [f"{kind}@{d}" for kind in ("prepare", "search", "final", "classical") for d in datasets]


def stamp(root: Path, datasets: list[str], families: list[str]) -> dict[str, Any]:
    """{"commit", "dvc_lock": {stage: {path: md5}}, "params": the params.yaml sections used}."""
    raw = read_yaml(root / "params.yaml") or {}
    params = {k: raw[k] for k in ("datasets", "families", "search", "final", "promote", "classical") if k in raw}
    params["prepare"] = {d: raw.get("prepare", {}).get(d) for d in datasets}
    return {"commit": git_commit(root), "dvc_lock": dvc_hashes(root, stages_of(datasets, families), families),
            "params": params}


def data_notes(finals: dict[str, dict[str, dict[str, Any]]]) -> dict[str, str]:
    """{dataset: its data's provenance note} for the datasets whose final records carry one (prepare
    wrote it into meta.json: pipeline/data/provenance.py); a dataset whose data is as published is absent."""
    notes = {}
    for dataset, results in finals.items():
        found = sorted({r[DATA_PROVENANCE] for r in results.values() if r.get(DATA_PROVENANCE)})
        if found:  # several only when families were trained on differently prepared data
            notes[dataset] = " | ".join(found)
    return notes


def machine_notes(finals: dict[str, dict[str, dict[str, Any]]],
                  searches: dict[str, dict[str, dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    """Every machine the report's search trials and final seeds ran on (pipeline.runtime.machine):
    fingerprint -> {its description, "threads": the threads its trials and seeds trained with,
    "used_by": ["<dataset>/<family> search", "... final"]}; records from before machines were
    recorded add nothing."""
    notes: dict[str, dict[str, Any]] = {}
    for kind, records in (("search", searches), ("final", finals)):
        for dataset, by_family in records.items():
            for family, record in by_family.items():
                runs = record.get("trials") if kind == "search" else record.get("seeds")
                for name, description in (record.get("machines") or {}).items():
                    note = notes.setdefault(name, {**description, "threads": set(), "used_by": set()})
                    note["used_by"].add(f"{dataset}/{family} {kind}")
                    note["threads"] |= {r["threads"] for r in runs or [] if r.get("machine") == name and r.get("threads")}
    return {name: {**note, "threads": sorted(note["threads"]), "used_by": sorted(note["used_by"])}
            for name, note in sorted(notes.items())}
