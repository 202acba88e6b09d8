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


def score(meta: Meta, output: torch.Tensor, y: torch.Tensor, mask: torch.Tensor) -> float:
    """output: (N, O) or (N, L, O) per step; y: (N,) or (N, L); mask: (N, L) observed steps."""
    if meta.per_step:
        output, y = output[mask], y[mask]
    if meta.metric == "accuracy":
        if meta.task == "binary":
            predicted = (output[..., 0] > 0).long()
        else:
            predicted = output.argmax(dim=-1)
        return (predicted == y).float().mean().item()
    if meta.metric == "auroc":
        # Imported here: scikit-learn costs a search trial's process 0.4 s of start-up (of 3.7 s)
        # and only AUROC datasets need it.
        from sklearn.metrics import roc_auc_score

        return float(roc_auc_score(y.numpy(), probabilities(meta, output).numpy()))
    if meta.metric == "mse":
        return torch.mean((output - y.reshape(output.shape).float()) ** 2).item()
    raise ValueError(f"unknown metric {meta.metric!r}; valid: accuracy, auroc, mse")
