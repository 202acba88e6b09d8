"""Metrics named in a dataset's metadata, computed from raw model outputs."""

from __future__ import annotations

import torch

from pipeline.data.contract import Meta


def probabilities(meta: Meta, output: torch.Tensor) -> torch.Tensor:
    """Raw outputs -> class probabilities (..., K) for classification, P(class 1) (...,) for binary."""
    if meta.task == "classification":
        return output.softmax(dim=-1)
    if meta.task == "binary":
        return output[..., 0].sigmoid()
    return output


def counts(meta: Meta, output: torch.Tensor, y: torch.Tensor, mask: torch.Tensor) -> tuple[int, int] | None:
    """(correct, scored) for a metric that is a ratio of counts (accuracy: series, or observed
    steps per step), None for the others (AUROC, MSE). Shapes as in `score`."""
    if meta.metric != "accuracy":
        return None
    if meta.per_step:
        output, y = output[mask], y[mask]
    predicted = (output[..., 0] > 0).long() if meta.task == "binary" else output.argmax(dim=-1)
    return int((predicted == y).sum()), int(y.numel())


def score(meta: Meta, output: torch.Tensor, y: torch.Tensor, mask: torch.Tensor) -> float:
    """output: (N, O) or (N, L, O) per step; y: (N,) or (N, L); mask: (N, L) observed steps.

    Accuracy is the count of correct predictions over the count scored, divided in float64 from
    the integers: equal counts give the same bits whatever the order of the sum (a float32 mean
    of 0/1 made 53/54 differ in the 8th digit between runs, and that decided ties)."""
    if meta.metric == "accuracy":
        correct, total = counts(meta, output, y, mask)  # type: ignore[misc]
        return correct / total if total else float("nan")
    if meta.per_step:
        output, y = output[mask], y[mask]
    if meta.metric == "auroc":
        # Imported here: scikit-learn costs a search trial's process 0.4 s of start-up (of 3.7 s)
        # and only AUROC datasets need it.
        from sklearn.metrics import roc_auc_score

        return float(roc_auc_score(y.numpy(), probabilities(meta, output).numpy()))
    if meta.metric == "mse":
        return torch.mean((output - y.reshape(output.shape).float()) ** 2).item()
    raise ValueError(f"unknown metric {meta.metric!r}; valid: accuracy, auroc, mse")
