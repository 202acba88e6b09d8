"""A paper reproduction that outlasts one working session: what a project's final stage has
finished, kept in one small archive, and put back so that `dvc repro` trains only what is left.

    python -m benchmarks.papers.run_state save --root PROJECT --out DIR
    python -m benchmarks.papers.run_state restore --archive DIR/run-state.tar.gz --root PROJECT

`save` archives the project's MLflow store (mlflow.db and mlartifacts/: every finished seed's
scores and best-validation weights), its Optuna storage, results/, dvc.lock, params.yaml and
data/raw.lock into DIR/run-state.tar.gz, and lists the finished seeds in DIR/seeds.json and
seeds.md (scores read from the store with sqlite3). Stop the run first (Ctrl-C): a seed still
training is not finished and trains again from its start.

`restore` puts them back into PROJECT, which must be the same absolute path (MLflow records its
artifacts' paths whole), hold the same code (the commit `save` recorded: the search's and the
final stage's fingerprints depend on it; git archive that commit) and have the raw data fetched
again (the archive holds no data: a user's local copy is never copied into the project). Then
`dvc repro` prepares the data again (the same bytes, pipeline/data/identity.py), finds the search
done and reopens the final stage's parent runs, training only the seeds that are not finished
(pipeline/final/resume.py).
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import subprocess
import tarfile
from pathlib import Path
from typing import Any

KEPT = ("mlflow.db", "mlartifacts", "optuna.db", "results", "dvc.lock", "params.yaml", "data/raw.lock")
MANIFEST = "run-state.json"


def _training_s(metrics: dict[str, float]) -> int | None:
    """Seconds of training: seconds per epoch x epochs. Not the MLflow run's span: a seed's run
    is closed with its stage, so a seed that ended before an interruption has a span that runs to
    the end of the resumed stage."""
    if metrics.get("seconds_per_epoch") is None or metrics.get("epoch") is None:
        return None
    return round(metrics["seconds_per_epoch"] * metrics["epoch"])


def finished_seeds(store: Path) -> list[dict[str, Any]]:
    """Every FINISHED final-stage seed run of the SQLite MLflow store: family, seed, scores."""
    with sqlite3.connect(f"file:{store}?mode=ro", uri=True) as db:
        rows = db.execute(
            "select r.run_uuid, r.name from runs r join tags t on t.run_uuid = r.run_uuid "
            "where t.key = 'stage' and t.value = 'final' and r.status = 'FINISHED' and r.name like 'seed-%'").fetchall()
        out = []
        for run_id, name in rows:
            tags = dict(db.execute("select key, value from tags where run_uuid = ?", (run_id,)).fetchall())
            metrics = dict(db.execute("select key, value from latest_metrics where run_uuid = ?", (run_id,)).fetchall())
            out.append({"family": tags.get("family"), "seed": int(tags.get("seed", -1)), "run": name,
                        "val": metrics.get("final_val"), "test": metrics.get("final_test"),
                        "best_epoch": metrics.get("best_epoch"), "seconds_per_epoch": metrics.get("seconds_per_epoch"),
                        "training_s": _training_s(metrics)})
    return sorted(out, key=lambda s: (s["family"], s["seed"]))


def save(root: Path, out: Path, commit: str | None = None) -> dict[str, Any]:
    """Archive root's run state into out/run-state.tar.gz; list its finished seeds beside it.
    `commit`: the project's code as a commit of ctsweep (default: root's git HEAD)."""
    root = root.resolve()
    present = [k for k in KEPT if (root / k).exists()]
    if "mlflow.db" not in present:
        raise SystemExit(f"{root}: no mlflow.db, nothing to keep")
    commit = commit or subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True).stdout.strip()
    seeds = finished_seeds(root / "mlflow.db")
    manifest = {"root": str(root), "commit": commit, "kept": present, "finished_seeds": seeds}
    out.mkdir(parents=True, exist_ok=True)
    partial = out / "run-state.tar.gz.partial"  # renamed when whole: an interrupted save leaves the old archive
    with tarfile.open(partial, "w:gz") as tar:
        for name in present:
            tar.add(root / name, arcname=name)
        manifest_file = out / MANIFEST
        manifest_file.write_text(json.dumps(manifest, indent=1))
        tar.add(manifest_file, arcname=MANIFEST)
    partial.replace(out / "run-state.tar.gz")
    lines = [f"# Finished seeds of {root} (code at `{commit[:12]}`)", "",
             "| family | seed | val | test | best epoch | s/epoch | training s |", "|---|---:|---:|---:|---:|---:|---:|"]
    shown = {"val": "{:.4f}", "test": "{:.4f}", "best_epoch": "{:.0f}", "seconds_per_epoch": "{:.1f}", "training_s": "{}"}
    lines += [f"| {s['family']} | {s['seed']} | " + " | ".join("-" if s[k] is None else form.format(s[k])
                                                          for k, form in shown.items()) + " |" for s in seeds]
    (out / "seeds.md").write_text("\n".join(lines) + "\n")
    (out / "seeds.json").write_text(json.dumps(seeds, indent=1))
    return manifest


def restore(archive: Path, root: Path) -> dict[str, Any]:
    """Put an archive's run state back into root (the path and code it was saved from)."""
    root = root.resolve()
    with tarfile.open(archive, "r:gz") as tar:
        manifest = json.loads(tar.extractfile(MANIFEST).read())  # type: ignore[union-attr]
        if manifest["root"] != str(root):
            raise SystemExit(f"{archive}: saved from {manifest['root']}; MLflow's artifact paths need the same folder, "
                             f"not {root}")
        if not (root / "dvc.yaml").is_file():
            raise SystemExit(f"{root}: no dvc.yaml; git archive commit {manifest['commit'][:12]} into it first")
        busy = [name for name in manifest["kept"] if name in ("mlflow.db", "mlartifacts", "results") and (root / name).exists()]
        if busy:
            raise SystemExit(f"{root}: {', '.join(busy)} already there; restore into a fresh copy of the code")
        tar.extractall(root, members=[m for m in tar.getmembers() if m.name != MANIFEST], filter="data")
    return manifest


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="benchmarks.papers.run_state", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="command", required=True)
    s = sub.add_parser("save")
    s.add_argument("--root", type=Path, required=True)
    s.add_argument("--out", type=Path, required=True)
    s.add_argument("--commit", help="the ctsweep commit the project's code is (default: the project's git HEAD)")
    r = sub.add_parser("restore")
    r.add_argument("--archive", type=Path, required=True)
    r.add_argument("--root", type=Path, required=True)
    args = ap.parse_args(argv)
    if args.command == "save":
        manifest = save(args.root, args.out, args.commit)
        print(f"kept {len(manifest['finished_seeds'])} finished seed(s) in {args.out / 'run-state.tar.gz'}")
    else:
        manifest = restore(args.archive, args.root)
        print(f"restored {len(manifest['finished_seeds'])} finished seed(s) into {args.root}; its code must be "
              f"ctsweep commit {manifest['commit'][:12]}, its raw data fetched again; then dvc repro")


if __name__ == "__main__":
    main()
