"""How long a `ctsweep` command takes to answer, whole process: a refusal, `--help`, `status`.

Each case runs the command as a user would, in a fresh process, `--repeats` times (5 by default),
one after another, and records each run's wall time and the peak resident memory of the process
(os.wait4's ru_maxrss). The table gives the median, the fastest and the slowest run and the median
peak memory. A scratch project is built once: the shipped params.yaml and search spaces, the
committed report (reports/metrics.json) and a real MLflow SQLite store holding one finished run
(`status` on a finished run) or one run left RUNNING (`status` when a run may be going on: the
path that asks MLflow).

    python -m benchmarks.commands.startup --out benchmarks/results/startup          # this checkout
    python -m benchmarks.commands.startup --code /path/to/other/checkout --out DIR  # another checkout's
                                                                                    # pipeline/, same venv

Figures depend on the machine and on its load: compare runs made one after the other.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]

# (name, arguments after `ctsweep`, the scratch project's edit: (file, old, new) or None, expected exit status)
CASES: list[tuple[str, list[str], tuple[str, str, str] | None, int]] = [
    ("ctsweep --help", ["--help"], None, 0),
    ("search: a dataset not in `datasets`", ["search", "nosuch"], None, 2),
    ("search: a family not in `families`", ["search", "japanese_vowels", "nosuch"], None, 2),
    ("check: a bad value in params.yaml", ["check"], ("params.yaml", "  num_samples: 6", "  num_samples: six"), 2),
    ("search: a misspelt key in a search space", ["search", "japanese_vowels"],
     ("search_spaces/cfc.yaml", "\n  hidden_size:", "\n  hiden_size:"), 2),
    ("status: a finished run", ["status"], None, 0),
    ("status: a run left RUNNING in the store", ["status"], None, 0),
]

SETUP = """
import sys
from mlflow.tracking import MlflowClient
client = MlflowClient(sys.argv[1])
run = client.create_run(client.create_experiment("ctsweep/japanese_vowels"))
if sys.argv[2] == "finished":
    client.set_terminated(run.info.run_id, "FINISHED")
"""


def _project(base: Path, name: str, edit: tuple[str, str, str] | None, store: str | None) -> Path:
    """A scratch project: the shipped params.yaml, spaces and report; an MLflow store when asked."""
    root = base / name.replace(" ", "_").replace(":", "").replace("`", "")[:40]
    shutil.copytree(ROOT / "search_spaces", root / "search_spaces")
    shutil.copy(ROOT / "params.yaml", root / "params.yaml")
    shutil.copytree(ROOT / "reports", root / "reports", ignore=shutil.ignore_patterns("*.png", "*.svg", "*.html"))
    if edit is not None:
        file, old, new = edit
        text = (root / file).read_text()
        if old not in text:
            raise SystemExit(f"benchmarks.commands.startup: {file} no longer holds {old!r}: update CASES")
        (root / file).write_text(text.replace(old, new, 1))
    if store is not None:  # in a separate process: this one stays free of MLflow
        subprocess.run([sys.executable, "-c", SETUP, f"sqlite:///{root / 'mlflow.db'}", store], check=True,
                       capture_output=True, timeout=600)
    return root


def _command(code: Path | None) -> list[str]:
    if code is None:
        return [str(Path(sys.executable).parent / "ctsweep")]
    return [sys.executable, "-c", "from pipeline.cli.app import main; main()"]


def _once(command: list[str], cwd: Path, env: dict[str, str]) -> tuple[float, float, int]:
    """(seconds, peak resident MiB, exit status) of one whole run."""
    start = time.perf_counter()
    proc = subprocess.Popen(command, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    return seconds, usage.ru_maxrss / 1024, proc.returncode  # ru_maxrss: KiB on Linux


def measure(repeats: int, code: Path | None, work: Path) -> list[dict[str, Any]]:
    env = {k: v for k, v in os.environ.items() if k not in ("MLFLOW_TRACKING_URI", "RAY_ADDRESS")}
    if code is not None:
        env["PYTHONPATH"] = str(code)
    rows = []
    for name, args, edit, expected in CASES:
        store = "finished" if name == "status: a finished run" else "running" if "RUNNING" in name else None
        root = _project(work, name, edit, store)
        command = [*_command(code), *args, *(["--root", str(root)] if args != ["--help"] else [])]
        runs = [_once(command, root, env) for _ in range(repeats)]
        codes = sorted({c for _, _, c in runs})
        if codes != [expected]:
            raise SystemExit(f"benchmarks.commands.startup: {name}: exit status {codes}, expected {expected}")
        seconds = [s for s, _, _ in runs]
        rows.append({"case": name, "command": " ".join(["ctsweep", *args]), "runs_s": [round(s, 3) for s in seconds],
                     "median_s": round(statistics.median(seconds), 3), "min_s": round(min(seconds), 3),
                     "max_s": round(max(seconds), 3),
                     "peak_mib": round(statistics.median(m for _, m, _ in runs), 1)})
    return rows


def machine_facts() -> dict[str, Any]:
    """CPU, cores, memory, load, Python and the commit, without importing the heavy libraries."""
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), "unknown") if Path("/proc/cpuinfo").is_file() else "unknown"
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout
    return {"cpu": cpu, "cores": os.cpu_count(), "memory_gib": round(os.sysconf("SC_PAGE_SIZE")
            * os.sysconf("SC_PHYS_PAGES") / 2**30, 1), "load_1min": round(os.getloadavg()[0], 2),
            "python": sys.version.split()[0], "commit": commit.strip()}


def markdown(report: dict[str, Any]) -> str:
    m = report["machine"]
    lines = [f"{report['date']}, commit {report['code_commit']}, {m['cpu']} ({m['cores']} cores), "
             f"load {m['load_1min']} at the start; {report['repeats']} runs per case\n",
             "| case | command | median s | fastest | slowest | peak MiB |", "|---|---|---|---|---|---|"]
    for r in report["rows"]:
        lines.append(f"| {r['case']} | `{r['command']}` | {r['median_s']:.2f} | {r['min_s']:.2f} | {r['max_s']:.2f} | "
                     f"{r['peak_mib']:.0f} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(prog="benchmarks.commands.startup", description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=5, help="runs per case (default 5)")
    ap.add_argument("--code", type=Path, default=None,
                    help="a checkout whose pipeline/ runs the commands (default: the installed ctsweep)")
    ap.add_argument("--out", type=Path, default=None, help="write startup.json and startup.md here")
    args = ap.parse_args(argv)
    if args.repeats < 1:
        ap.error("--repeats: at least 1")
    if args.code is not None and not (args.code / "pipeline" / "cli" / "app.py").is_file():
        ap.error(f"--code {args.code}: not a ctsweep checkout (no pipeline/cli/app.py)")
    code_root = (args.code or ROOT).resolve()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=code_root, capture_output=True, text=True)
    with tempfile.TemporaryDirectory(prefix="ctsweep-bench-startup-") as work:
        rows = measure(args.repeats, args.code and args.code.resolve(), Path(work))
    report = {"date": datetime.date.today().isoformat(), "machine": machine_facts(), "repeats": args.repeats,
              "code": str(code_root), "code_commit": commit.stdout.strip() or "unknown", "rows": rows}
    text = markdown(report)
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "startup.json").write_text(json.dumps(report, indent=1) + "\n")
        (args.out / "startup.md").write_text(text)
    print(text, end="")
    return report


if __name__ == "__main__":
    main()
