"""Token datasets (IMDB): a learned embedding in front of any family that reads raw values.

The dataset's single channel holds token ids; the embedding turns each into a vector of
`embedding_size` channels, which the family reads as if they were observed values. Families
whose inputs are built once from the values before training (spline coefficients,
log-signatures, GRU-D's last-observed values) cannot sit behind a learned embedding and are
refused with the list of those that can.
"""

from __future__ import annotations

import inspect

import torch
from torch import nn

from pipeline.errors import ConfigError
from pipeline.models.base import SequenceModel
from pipeline.models.builtin import EMBED_DIM, embedding_arguments_of




def embedding_arguments(cls: type[SequenceModel]) -> dict[str, inspect.Parameter]:
    """The keys a space may set for the embedding in front of `cls`: `embed_dim` (None: the
    dataset's embedding_size), for the families that can read an embedding at all."""
    return embedding_arguments_of(cls.representation)


def check_token_family(family: str, cls: type[SequenceModel], dataset: str) -> None:
    """Raise ConfigError unless `cls` reads the plain "raw" representation."""
    if cls.representation != "raw":
        from pipeline.models import MODELS

        valid = sorted(name for name, c in MODELS.items() if c.representation == "raw")
        raise ConfigError(
            f"family {family!r} reads the {cls.representation!r} representation, built from the values "
            f"before training; {dataset}'s tokens need a learned embedding first, which only families "
            f"reading 'raw' inputs take: {valid}"
        )


class TokenEmbedded(nn.Module):
    """family(embedding(token ids)): x (B, L, 1) ids -> (B, L, E) -> the family's output."""

    def __init__(self, inner: SequenceModel, vocab_size: int, embedding_size: int, dropout: float = 0.0) -> None:
        super().__init__()
        self.inner = inner
        self.embedding = nn.Embedding(vocab_size, embedding_size)
        # Dropout on the embedded vectors (CfC Table S3's `embed_dr`); no parameters, so a checkpoint
        # loads into a model built with any rate, and it is the identity in evaluation.
        self.dropout = nn.Dropout(dropout)

    def forward(self, **inputs: torch.Tensor) -> torch.Tensor:
        ids = inputs["x"][..., 0].long()  # (B, L); padding holds 0 after nan_to_num, a valid id
        return self.inner(**{**inputs, "x": self.dropout(self.embedding(ids))})  # x: (B, L, E)

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters() if p.requires_grad)
