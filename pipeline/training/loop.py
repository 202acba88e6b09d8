"""The one training loop every family shares, in search trials and in final runs alike."""

from __future__ import annotations

import copy
import math
import os
import time
from typing import Any, Callable

import torch
import torch.nn.functional as F

from pipeline.runtime.allocator import keep_freed_memory
from pipeline.data.contract import Dataset, Meta
from pipeline.data.inputs import load_inputs
from pipeline.errors import ConfigError, TrialFailedError
from pipeline.training.metrics import counts, score
from pipeline.training.budget import batches_per_pass, effective_batch, passes_per_epoch
from pipeline.training.selection import beats, is_better, lowers_loss, progressed
from pipeline.models import SequenceModel, get_model_class
from pipeline.models.base import later_steps_problem
from pipeline.models.blocks.embedding import EMBED_DIM, TokenEmbedded, check_token_family
from pipeline.config.protocol import TrainSettings, class_weights, make_optimizer, make_scheduler, per_batch

__all__ = ["TimeLimitReached", "TrainSettings", "Trainer", "beats", "build_model", "device_for", "is_better",
           "loss_fn"]


class TimeLimitReached(Exception):
    """Raised between batches once a run's wall-clock deadline has passed."""


def build_model(family: str, meta: Meta, input_channels: int, model_kwargs: dict[str, Any],
                embed_dropout: float = 0.0) -> SequenceModel:
    """Instantiate a registered family for a dataset's input and output shape.

    On a token dataset (meta.vocab_size > 0) the family reads a learned embedding of the ids, of
    `embed_dim` channels when model_kwargs sets it (else the dataset's embedding_size), with
    dropout `embed_dropout` on it in training (a training key: the rebuilt model of a promoted
    checkpoint evaluates without it either way).
    """
    cls = get_model_class(family)
    model_kwargs = dict(model_kwargs)
    embed_dim = model_kwargs.pop(EMBED_DIM, None)
    if meta.vocab_size:
        check_token_family(family, cls, meta.name)
        size = embed_dim or meta.embedding_size
        inner = cls(input_channels=size, output_size=meta.output_size, per_step=meta.per_step, **model_kwargs)
        return TokenEmbedded(inner, meta.vocab_size, size, embed_dropout)
    if embed_dim is not None:
        raise ConfigError(f"`{EMBED_DIM}` sizes a token embedding, but {meta.name}'s inputs are not tokens; "
                          "allowed: only on token datasets")
    return cls(input_channels=input_channels, output_size=meta.output_size, per_step=meta.per_step, **model_kwargs)


def loss_fn(meta: Meta, output: torch.Tensor, y: torch.Tensor, mask: torch.Tensor,
            weight: torch.Tensor | None = None) -> torch.Tensor:
    """output: (B, O) or (B, L, O) when per-step; y: (B,) or (B, L) (classes) or (..., O) (regression).

    weight (pipeline.config.protocol.class_weights): (O,) class weights for classification, (1,) the
    positive weight for binary; None: unweighted. Both take the weighted mean sum(w l) / sum(w)
    (torch's cross_entropy with `weight`), which is what the CfC authors' code does with Table S2's
    class_weight (a two-class cross-entropy weighted (1, w)); the FWP authors' Sepsis code instead
    scales positive terms and divides by the batch size (BCEWithLogitsLoss(pos_weight)).
    """
    if meta.per_step:  # score observed steps only
        output, y = output[mask], y[mask]
    if meta.task == "classification":
        return F.cross_entropy(output, y, weight=weight)
    if meta.task == "binary":
        if weight is None:
            return F.binary_cross_entropy_with_logits(output[..., 0], y.float())
        terms = F.binary_cross_entropy_with_logits(output[..., 0], y.float(), reduction="none")
        w = torch.where(y == 1, weight, torch.ones_like(weight))
        return (w * terms).sum() / w.sum()
    return F.mse_loss(output, y.reshape(output.shape).float())


class Trainer:
    """Holds a model, its optimiser and the prepared splits of one dataset."""

    def __init__(self, family: str, model_kwargs: dict[str, Any], settings: TrainSettings,
                 dataset: Dataset, seed: int, device: str = "cpu", epochs: int | None = None,
                 min_steps: int = 0) -> None:
        """`epochs`: the run's budget, which a step schedule given as `lr_step_fraction` needs;
        with `min_steps`, an epoch is as many whole passes over the training split as make the
        budget at least that many optimiser steps (pipeline/training/budget.py)."""
        keep_freed_memory()  # before the first tensor: pipeline/runtime/allocator.py
        if device.startswith("cuda"):
            deterministic_cuda()
        torch.manual_seed(seed)
        self.meta, self.settings = dataset.meta, settings
        cls = get_model_class(family)
        if self.meta.per_step and (problem := later_steps_problem(cls, model_kwargs)):
            # The search and final stages train the causal variant (pipeline/spaces/causal.py); this
            # catches any other way in, so no per-step run reads inputs after the step it predicts.
            raise ConfigError(f"{family} on per-step dataset {self.meta.name}: {problem}; allowed: that variant")
        channels = dataset.splits["train"].x.shape[2]
        self.model = build_model(family, self.meta, channels, model_kwargs, settings.embed_dropout).to(device)
        # Whole splits live on the device: the datasets are small, and it saves a copy per batch.
        # Built once per split, or read from what prepare precomputed / an earlier trial cached.
        self.inputs = {name: {k: v.to(device) for k, v in load_inputs(cls, name, s, model_kwargs, dataset.folder).items()}
                       for name, s in dataset.splits.items()}
        self.targets = {name: torch.from_numpy(s.y).to(device) for name, s in dataset.splits.items()}
        self.masks = {name: torch.from_numpy(s.mask).to(device) for name, s in dataset.splits.items()}
        self.optimizer = make_optimizer(self.model.parameters(), settings)
        self.scheduler = make_scheduler(self.optimizer, settings, epochs)
        weight = class_weights(self.meta.task, settings, self.targets["train"].cpu(), self.masks["train"].cpu(),
                               self.meta.per_step, self.meta.output_size)
        self.loss_weight = None if weight is None else weight.to(device)
        self.generator = torch.Generator().manual_seed(seed)
        n_train = len(self.targets["train"])
        self.batch_size = effective_batch(settings.batch_size, n_train)  # never more than the split
        self.passes = passes_per_epoch(n_train, settings.batch_size, epochs, min_steps)
        self.epoch = 0
        self.steps = 0  # optimiser steps taken
        # Early stopping (settings.patience, selection.PROGRESS_RULE): the best validation metric
        # and the lowest validation loss so far, and the epochs since either last moved.
        self.best_val: float | None = None
        self.lowest_val_loss: float | None = None
        self.stale_epochs = 0
        self.device = device
        # Data parallelism (see `distribute`): one process trains everything by default.
        self.rank, self.world = 0, 1
        self.train_module: torch.nn.Module = self.model  # what training forwards through: the model or its DDP wrapper

    def distribute(self, wrap: Callable[[torch.nn.Module], torch.nn.Module], rank: int, world: int) -> None:
        """Train as rank `rank` of `world` processes that each hold this same Trainer (same dataset,
        seed and state), with torch.distributed already initialised.

        `wrap` returns the model's DistributedDataParallel wrapper (ray.train.torch.prepare_model),
        which averages gradients across ranks in backward. Every rank draws the same global batch
        order and takes idx[rank::world] of each batch, weighting its loss by its share of the batch,
        so an epoch is the same optimisation as in one process up to float summation order (random
        layers such as dropout draw different masks per rank). Validation, state() and weights()
        use the unwrapped model; state() is interchangeable with a single-process Trainer's.
        """
        if world < 1 or not 0 <= rank < world:
            raise ValueError(f"rank {rank} is not in a world of {world} processes")
        self.rank, self.world = rank, world
        self.train_module = wrap(self.model)

    def _batch(self, split: str, idx: torch.Tensor) -> dict[str, torch.Tensor]:
        return {k: v[idx] for k, v in self.inputs[split].items()}

    def _forward(self, split: str, idx: torch.Tensor, module: torch.nn.Module | None = None) -> torch.Tensor:
        try:
            return (self.model if module is None else module)(**self._batch(split, idx))
        except AssertionError as exc:
            # torchdiffeq signals step-size underflow and max_num_steps with assert.
            raise TrialFailedError(f"ODE solver failed at epoch {self.epoch + 1}: {exc}") from exc

    def train_epoch(self, deadline: float | None = None) -> float:
        """One epoch: `self.passes` passes over train, each in its own seeded random order;
        returns the mean loss over them.

        With a `deadline` (time.monotonic()), raises TimeLimitReached between batches past it.
        """
        self.train_module.train()
        n = len(self.targets["train"])
        total = 0.0
        for _ in range(self.passes):
            order = torch.randperm(n, generator=self.generator)  # the same order on every rank
            for start in range(0, n, self.batch_size):
                idx = order[start:start + self.batch_size]
                total += self._step(idx) * len(idx)
                self.steps += 1
                # Ranks stop together: one leaving early would leave the others waiting in a collective.
                if deadline is not None and self._any_rank(time.monotonic() > deadline):
                    raise TimeLimitReached(f"time limit reached during epoch {self.epoch + 1}")
        self.epoch += 1
        if self.scheduler is not None and not per_batch(self.settings):
            self.scheduler.step()
        return total / (n * self.passes)

    def _step(self, idx: torch.Tensor) -> float:
        """One optimiser step on the global batch `idx` (B,); returns the batch's mean loss."""
        local, weight = self._shard(idx)
        output = self._forward("train", local, self.train_module)
        if weight == 0.0:
            # Nothing of this batch here: a zero loss that still reaches every parameter, because
            # DDP's backward waits for a gradient of each one from every rank.
            loss = output.sum() * 0.0
        else:
            loss = loss_fn(self.meta, output, self.targets["train"][local], self.masks["train"][local],
                           self.loss_weight)
            if self.world > 1:
                loss = loss * weight
        batch_loss = self._batch_mean(loss)
        if not math.isfinite(batch_loss):  # the same value, so the same decision, on every rank
            raise TrialFailedError(f"non-finite training loss {batch_loss} at epoch {self.epoch + 1}")
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self._clip_and_check_gradients(batch_loss)
        self.optimizer.step()
        if self.scheduler is not None and per_batch(self.settings):
            self.scheduler.step()
        return batch_loss

    def _clip_and_check_gradients(self, batch_loss: float) -> None:
        """Clip the gradient to `grad_clip` (when > 0; on the already averaged gradient: the same
        clip as one process), and fail the run before the optimiser step when a gradient value is
        inf or NaN although the loss was finite: the update would make the weights NaN, and the run
        would otherwise fail only at the next step's loss, naming the wrong cause. Seen with
        ode_rnn_tw on GunPoint (150 steps) and OSULeaf (427): a gradient beyond float32 back through
        the recurrence, with a bounded forward pass; clipping cannot help.

        Finite values whose float32 sum of squares overflows (beyond about 1e19 each: seen with
        cde_fwp_delta on OSULeaf) are not a failure: Adam's update stays bounded, and before this
        check such runs trained on. Their norm is then taken in float64, so that clipping scales
        the gradient to `grad_clip` (torch.nn.utils.clip_grad_norm_ would zero it: max_norm / inf).
        After DDP's reduction every rank holds the same gradient, so every rank decides alike."""
        grads = [p.grad for p in self.model.parameters() if p.grad is not None]
        if not grads:
            return
        norm = torch.nn.utils.get_total_norm(grads)
        if not math.isfinite(float(norm)):
            if not all(bool(torch.isfinite(g).all()) for g in grads):
                raise TrialFailedError(
                    f"non-finite gradient (norm {float(norm)}) at epoch {self.epoch + 1}, step {self.steps + 1}, "
                    f"with a finite training loss {batch_loss:.4g}: exploding gradients through the sequence (long "
                    f"series, a high lr); a lower `lr` may help, `grad_clip` cannot")
            norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g.double()) for g in grads]))
        if self.settings.grad_clip > 0:
            torch.nn.utils.clip_grads_with_norm_(self.model.parameters(), self.settings.grad_clip, norm)

    def _loss_terms(self, idx: torch.Tensor) -> int:
        """How many terms loss_fn averages over for samples `idx`: observed steps when per-step."""
        return int(self.masks["train"][idx].sum()) if self.meta.per_step else len(idx)

    def _shard(self, idx: torch.Tensor) -> tuple[torch.Tensor, float]:
        """This rank's samples of global batch `idx` and the weight of their mean loss.

        DDP averages the ranks' gradients, so rank r scales its mean loss by
        world * terms_r / terms_batch: the average is then the gradient of the whole batch's mean
        loss, also for uneven shards. A rank with no terms gets one sample (idx[:1], forwarded
        but weighted 0) so that it still joins the gradient reduction.
        """
        if self.world == 1:
            return idx, 1.0
        local = idx[self.rank::self.world]
        terms = self._loss_terms(local) if len(local) else 0
        if terms == 0:
            return idx[:1], 0.0
        return local, self.world * terms / self._loss_terms(idx)

    def _batch_mean(self, loss: torch.Tensor) -> float:
        """The global batch's mean loss: the ranks' weighted losses summed, over the world size."""
        if self.world == 1:
            return loss.item()
        total = loss.detach().reshape(1).clone()
        torch.distributed.all_reduce(total)
        return total.item() / self.world

    def _any_rank(self, flag: bool) -> bool:
        """Whether `flag` holds on any rank (one small collective when data-parallel)."""
        if self.world == 1:
            return flag
        votes = torch.tensor([float(flag)], device=self.device)
        torch.distributed.all_reduce(votes)
        return votes.item() > 0

    @torch.no_grad()
    def predict(self, split: str, batch_size: int = 512) -> torch.Tensor:
        """Raw outputs for a whole split: (N, O) or (N, L, O)."""
        self.model.eval()
        n = len(self.targets[split])
        outs = [self._forward(split, torch.arange(s, min(s + batch_size, n))) for s in range(0, n, batch_size)]
        return torch.cat(outs)

    def evaluate(self, split: str) -> float:
        return self.evaluate_with_loss(split)[0]

    def evaluate_with_loss(self, split: str) -> tuple[float, float]:
        """(metric, training loss) on a whole split, from one prediction pass. The loss breaks ties
        of the metric: on a small validation split accuracy saturates (54 JapaneseVowels series:
        several epochs and families at the same 98.15 %), the cross-entropy still orders them."""
        value, loss, _ = self.evaluation(split)
        return value, loss

    def evaluation(self, split: str) -> tuple[float, float, tuple[int, int] | None]:
        """(metric, training loss, counts) on a whole split from one prediction pass; counts:
        (correct, scored) for accuracy (metrics.counts), None for other metrics."""
        output, y, mask = self.predict(split).cpu(), self.targets[split].cpu(), self.masks[split].cpu()
        value = score(self.meta, output, y, mask)
        if not math.isfinite(value):
            raise TrialFailedError(f"non-finite {self.meta.metric} on {split} at epoch {self.epoch}")
        weight = None if self.loss_weight is None else self.loss_weight.cpu()
        return value, float(loss_fn(self.meta, output, y, mask, weight)), counts(self.meta, output, y, mask)

    def run_epoch(self, deadline: float | None = None) -> dict[str, float]:
        """Train one epoch and score validation: {epoch, steps (so far), train_loss, val_metric,
        val_loss, epoch_seconds, lr, stale_epochs (epochs since the last progress, early stopping's
        count), best_val_metric (the best validation score so far; absent while none is finite):
        the last two for progress, pipeline.progress}."""
        start = time.perf_counter()
        lr = self.optimizer.param_groups[0]["lr"]  # the rate this epoch trained with
        train_loss = self.train_epoch(deadline)
        seconds = time.perf_counter() - start
        val, val_loss = self.evaluate_with_loss("val")
        moved = progressed(val, val_loss, self.best_val, self.lowest_val_loss, self.meta.mode)
        if is_better(val, self.best_val, self.meta.mode):
            self.best_val = val
        if lowers_loss(val_loss, self.lowest_val_loss):  # moved only by progress, as Keras' min_delta: a
            self.lowest_val_loss = val_loss              # slow fall adds up until it counts
        self.stale_epochs = 0 if moved else self.stale_epochs + 1
        best = {} if self.best_val is None or not math.isfinite(self.best_val) else {"best_val_metric": self.best_val}
        return {"epoch": self.epoch, "steps": self.steps, "train_loss": train_loss, "val_metric": val,
                "val_loss": val_loss, "epoch_seconds": seconds, "lr": lr, "stale_epochs": self.stale_epochs, **best}

    @property
    def steps_per_epoch(self) -> int:
        """Optimiser steps in one epoch: its passes times the batches of a pass."""
        return self.passes * batches_per_pass(len(self.targets["train"]), self.batch_size)

    @property
    def stopped_early(self) -> bool:
        """Whether early stopping ends the run now: `patience` epochs without progress
        (selection.PROGRESS_RULE: a better validation metric or a lower validation loss)."""
        return 0 < self.settings.patience <= self.stale_epochs

    def weights(self) -> dict[str, torch.Tensor]:
        """A CPU copy of the model's weights (loadable where there is no GPU)."""
        return {k: v.detach().cpu().clone() for k, v in self.model.state_dict().items()}

    def state(self) -> dict[str, Any]:
        """A snapshot (copied: state_dict() tensors alias the live parameters)."""
        return copy.deepcopy({"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(),
                              "scheduler": None if self.scheduler is None else self.scheduler.state_dict(),
                              "generator": self.generator.get_state(), "epoch": self.epoch,
                              "steps": self.steps, "best_val": self.best_val,
                              "lowest_val_loss": self.lowest_val_loss, "stale_epochs": self.stale_epochs})

    def load_state(self, state: dict[str, Any]) -> None:
        """Resume from state(); a checkpoint written before schedules existed has none to restore."""
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        if self.scheduler is not None and state.get("scheduler") is not None:
            self.scheduler.load_state_dict(state["scheduler"])
        self.generator.set_state(state["generator"])
        self.epoch = state["epoch"]
        # a checkpoint from before steps were counted: its epochs were one pass each
        self.steps = state.get("steps", self.epoch * batches_per_pass(len(self.targets["train"]), self.batch_size))
        self.best_val, self.stale_epochs = state.get("best_val"), state.get("stale_epochs", 0)
        self.lowest_val_loss = state.get("lowest_val_loss")


DETERMINISTIC_ENV = "CTSWEEP_CUDA_DETERMINISTIC"  # "0": let torch pick its fastest CUDA kernels


def deterministic_cuda() -> None:
    """On a GPU, ask torch for its deterministic algorithms (issue 28), before the first CUDA tensor.

    On CPU every operation the zoo uses is deterministic for a fixed thread count. On CUDA, torch
    documents as nondeterministic (torch.use_deterministic_algorithms): cuBLAS matrix products
    unless CUBLAS_WORKSPACE_CONFIG fixes its workspace (set here to ":4096:8", as the docs say),
    and atomic-add kernels: index_add_ / scatter_add_ / index_put_(accumulate) on CUDA and the
    backward of nn.Embedding (the token families) and of gather. `warn_only`: an operation
    without a deterministic kernel warns instead of failing the trial. On an H100 it cost 1.5 to
    2.7 times the epoch time of the default families (docs/benchmarks/gpu.md, measured with
    benchmarks/gpu/trainer.py); `CTSWEEP_CUDA_DETERMINISTIC=0` turns it off.
    """
    if os.environ.get(DETERMINISTIC_ENV, "1") == "0":
        return
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.use_deterministic_algorithms(True, warn_only=True)


def device_for(gpus: float) -> str:
    """CUDA when the run was given a GPU share (Ray sets CUDA_VISIBLE_DEVICES to it), else CPU."""
    return "cuda" if gpus > 0 and torch.cuda.is_available() else "cpu"
