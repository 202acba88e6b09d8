"""The benchmark report (the dict written to zoo.json) as Markdown."""

from __future__ import annotations

from typing import Any


def _num(value: float | None, digits: int = 3) -> str:
    return "–" if value is None else f"{value:.{digits}g}"


def _mib(value: float | None) -> str:
    return "–" if value is None else f"{value:.1f}"


def _status(row: dict[str, Any]) -> str:
    if row.get("status") == "ok":
        return "ok"
    return f"{row.get('status')}: {str(row.get('error', ''))[:80]}".replace("|", "/")


def _header(report: dict[str, Any]) -> list[str]:
    m, s = report["machine"], report["settings"]
    device = m.get("gpu") or f"{m['cpu']}, {m['cores']} cores, {m['torch_threads']} torch threads"
    return [
        "# Model-zoo benchmark", "",
        f"{m['date']} · {device} · torch {m['torch']} · Python {m['python']} · commit {m.get('git_commit')}"
        f" · total {report.get('total_seconds', 0):.0f} s · load average (1 min) at start, end: "
        f"{m.get('load_average')}", "",
        f"Synthetic classification data: {s['sequences']} irregular sequences, L = {s['length']}, "
        f"C = {s['channels']}, 10% missing values; batch {s['batch_size'] or 'per family'}, Adam, "
        f"reference configuration of each family; {s['warmup']} warm-up epoch(s), then the median "
        f"of {s['epochs']} timed epoch(s). Memory: peak during training above the level it "
        f"started from (data, model); 'peak' is the whole process (CPU RSS) or all CUDA allocations.",
        "",
    ]


def _families(report: dict[str, Any]) -> list[str]:
    lines = ["## Seconds per training epoch and memory", "",
             "| family | parameters | s / epoch | train memory (MiB) | peak (MiB) | set-up (s) | status |",
             "|---|---:|---:|---:|---:|---:|---|"]
    for r in report["families"]:
        params = "–" if r.get("params") is None else f"{r['params']:,}"
        lines.append(f"| {r['family']} | {params} | {_num(r.get('seconds_per_epoch'))} | "
                     f"{_mib(r.get('train_mb'))} | {_mib(r.get('peak_mb'))} | "
                     f"{_num(r.get('setup_seconds'), 2)} | {_status(r)} |")
    return lines + [""]


def _speedup(report: dict[str, Any]) -> list[str]:
    section = report.get("cfc_vs_ode_rnn")
    lines = ["## CfC speed-up over ODE-RNN (fixed-step rk4)", ""]
    if not section:
        return lines + ["Not measured: needs both cfc and ode_rnn in the run.", ""]
    ode = section["ode_rnn"]
    kw = ode.get("model_kwargs", {})
    lines += [f"ODE-RNN: hidden {kw.get('hidden_size')}, rk4 with {kw.get('solver_steps')} steps per "
              f"observation interval, {_num(ode.get('seconds_per_epoch'))} s / epoch. "
              "Speed-up = ODE-RNN median s/epoch ÷ CfC median s/epoch, measured in this run.", "",
              "| CfC configuration | CfC hidden | CfC s / epoch | speed-up |", "|---|---:|---:|---:|"]
    for pair in section["pairs"]:
        cfc = pair["cfc"]
        hidden = cfc.get("model_kwargs", {}).get("hidden_size")
        speedup = "–" if pair["speedup"] is None else f"{pair['speedup']:.2f}x"
        lines.append(f"| {pair['label']} | {hidden} | {_num(cfc.get('seconds_per_epoch'))} | {speedup} |")
    return lines + [""]


def _growth(rows: list[dict[str, Any]], row: dict[str, Any]) -> tuple[str, str]:
    """Train memory at this length against the same family and adjoint setting at the shortest
    length: (ratio, MiB per extra step)."""
    same = [r for r in rows if r["family"] == row["family"] and r["adjoint"] == row["adjoint"]]
    first = min(same, key=lambda r: r["length"])
    if not (first.get("train_mb") and row.get("train_mb")) or row is first:
        return "–", "–"
    per_step = (row["train_mb"] - first["train_mb"]) / (row["length"] - first["length"])
    return f"{row['train_mb'] / first['train_mb']:.2f}x", f"{per_step:.2f}"


def _adjoint(report: dict[str, Any]) -> list[str]:
    rows = report.get("fwp_adjoint") or []
    s = report["settings"]
    lines = ["## Fast weight programmers: training memory with and without the adjoint", ""]
    if not rows:
        return lines + ["Not measured: no fast-weight family with an `adjoint` argument in the run.", ""]
    lines += [f"{s['adjoint_sequences']} sequences, one epoch (no warm-up), reference configuration "
              "otherwise. Growth: train memory over the same setting at the shortest length, and the "
              "extra MiB per extra step; flat memory would read 1.00x and 0.", "",
              "| family | L | adjoint | s / epoch | train memory (MiB) | growth | MiB / extra step | status |",
              "|---|---:|---|---:|---:|---:|---:|---|"]
    for r in rows:
        ratio, per_step = _growth(rows, r)
        lines.append(f"| {r['family']} | {r['length']} | {r['adjoint']} | {_num(r.get('seconds_per_epoch'))} | "
                     f"{_mib(r.get('train_mb'))} | {ratio} | {per_step} | {_status(r)} |")
    return lines + [""]


def render_markdown(report: dict[str, Any]) -> str:
    return "\n".join(_header(report) + _families(report) + _speedup(report) + _adjoint(report))
