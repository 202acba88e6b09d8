"""How much of a per-step regression family's test score comes from reading the next step.

    .venv/bin/python -m benchmarks.papers.next_step_leak --root PROJECT --dataset walker2d \
        --family cdr_nde_heat [--out DIR]

On Walker2d the target of a step is the next simulation state, which is the next kept step's
input unless that step was dropped. A family whose output at a step reads later steps (the
final record's `reads_later_steps`: CDR-NDE-heat's Laplacian, Eq. 14) can copy it. For each
seed of the family's final record (results/<dataset>/final/<family>.json), its best-validation
weights are read back from MLflow (pipeline.final.resume.load_state) and the test split is
predicted twice:

    as prepared   the recorded test score, split by what follows each observed step: the next
                  step kept (a gap of one time unit to it), a dropped step in between (a larger
                  gap), or nothing (the window's last step)
    gaps hidden   every series' times replaced by 0, 1, 2, ...: the model sees no step was dropped

Writes next_step_leak.json and .md to --out and prints the Markdown.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from benchmarks.outputs import save_report

import numpy as np

KEPT, DROPPED, LAST = "next kept", "next dropped", "last step"


def next_step_kind(t: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """(N, L) labels: KEPT where the next observed step is one time unit on, DROPPED where it is
    further, LAST where no observed step follows (steps not observed get LAST; they are never
    scored). t (N, L) in simulation steps, mask (N, L) bool."""
    kind = np.full(mask.shape, LAST, dtype=object)
    gap = np.diff(t.astype(np.float64), axis=1)  # (N, L-1): to step i+1
    follows = mask[:, 1:] & mask[:, :-1]
    kind[:, :-1] = np.where(follows, np.where(gap > 1.5, DROPPED, KEPT), LAST)
    return kind


def hidden_gaps(t: np.ndarray) -> np.ndarray:
    """(N, L) times 0, 1, 2, ... for every series: as if no step had been dropped."""
    return np.broadcast_to(np.arange(t.shape[1], dtype=t.dtype), t.shape).copy()


def squared_errors(predicted: np.ndarray, y: np.ndarray) -> np.ndarray:
    """(N, L): each step's squared error averaged over the outputs, as the MSE metric averages it."""
    return ((predicted.astype(np.float64) - y) ** 2).reshape(*y.shape[:2], -1).mean(-1)


def summarise(errors: np.ndarray, mask: np.ndarray, kind: np.ndarray) -> dict[str, Any]:
    """MSE over the observed steps, its square root, and the MSE and share of each kind of step."""
    scored = mask.astype(bool)
    out: dict[str, Any] = {"mse": float(errors[scored].mean()), "rmse": float(np.sqrt(errors[scored].mean()))}
    for name in (KEPT, DROPPED, LAST):
        where = scored & (kind == name)
        out[name] = {"mse": float(errors[where].mean()) if where.any() else None,
                     "share": float(where.sum() / scored.sum())}
    return out


def _predict(family: str, model: Any, model_kwargs: dict[str, Any], x: np.ndarray, t: np.ndarray,
             mask: np.ndarray, batch: int = 256) -> np.ndarray:
    import torch

    from pipeline.models import get_model_class

    inputs = get_model_class(family).prepare_inputs(
        *(torch.from_numpy(np.ascontiguousarray(a)) for a in (x, t, mask)), **model_kwargs)
    with torch.no_grad():
        parts = [model(**{k: v[i:i + batch] for k, v in inputs.items()}) for i in range(0, len(x), batch)]
    return torch.cat(parts).numpy()


def measure(root: Path, dataset: str, family: str) -> dict[str, Any]:
    """Every seed of the family's final record, as prepared and with the gaps hidden."""
    import torch

    from pipeline.data.contract import load_dataset
    from pipeline.final.resume import load_state
    from pipeline.models import get_model_class
    from pipeline.models.base import model_arguments
    from pipeline.stores import tracking
    from pipeline.training.loop import build_model

    torch.set_num_threads(1)
    record = json.loads((root / "results" / dataset / "final" / f"{family}.json").read_text())
    data = load_dataset(root / "data" / "processed" / dataset)
    test = data.splits["test"]
    allowed = set(model_arguments(get_model_class(family)))
    kwargs = {k: v for k, v in record["model_config"].items() if k in allowed}
    kind = next_step_kind(test.t, test.mask)
    seeds = []
    for seed in record["seeds"]:
        model = build_model(family, data.meta, test.x.shape[2], kwargs)
        model.load_state_dict(load_state(tracking.tracking_uri(root), seed["mlflow_run_id"]))  # best-validation weights
        model.eval()
        found = {name: summarise(squared_errors(_predict(family, model, kwargs, test.x, times, test.mask), test.y),
                                 test.mask, kind)
                 for name, times in (("as prepared", test.t), ("gaps hidden", hidden_gaps(test.t)))}
        seeds.append({"seed": seed["seed"], "recorded_test": seed["test"], **found})
    return {"dataset": dataset, "family": family, "reads_later_steps": record.get("reads_later_steps", ""),
            "seeds": seeds}


def render(report: dict[str, Any]) -> str:
    lines = [f"# {report['family']} on {report['dataset']}: test error by what follows a step", "",
             "| seed | recorded | as prepared: MSE (RMSE) | next kept | next dropped | last step | gaps hidden: MSE |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for s in report["seeds"]:
        a, h = s["as prepared"], s["gaps hidden"]
        kinds = " | ".join(f"{a[k]['mse']:.4f}" if a[k]["mse"] is not None else "—" for k in (KEPT, DROPPED, LAST))
        lines.append(f"| {s['seed']} | {s['recorded_test']:.4f} | {a['mse']:.4f} ({a['rmse']:.4f}) | {kinds} | "
                     f"{h['mse']:.4f} |")
    first = report["seeds"][0]["as prepared"] if report["seeds"] else None
    if first:
        shares = ", ".join(f"{k} {100 * first[k]['share']:.1f} %" for k in (KEPT, DROPPED, LAST))
        lines += ["", f"Steps scored: {shares}."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--root", type=Path, required=True, help="the project whose final stage trained the family")
    ap.add_argument("--dataset", required=True)
    ap.add_argument("--family", required=True)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    report = measure(args.root.resolve(), args.dataset, args.family)
    text = render(report)
    save_report(args.out, "next_step_leak", report, text)
    print(text)
    return report


if __name__ == "__main__":
    main()
