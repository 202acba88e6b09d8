"""`ctsweep check-family NAME`: the model contract, checked on one family (a user's own first of all).

Each check runs on a small synthetic batch of irregularly sampled series (6 series, 3 channels,
lengths 2-10, some values missing) with the model arguments of the family's search-space
reference configuration (`reference` over `fixed`), and gives pass or the reason it failed:

  representation   `representation` names the inputs (raw, interp, ...), and `prepare_inputs` returns exactly the
                   keyword inputs `forward` takes, each indexed by sequence along dim 0
  search space     the family's space file parses and names only its arguments
  per-sequence     one output row per sequence, (B, output_size), finite
  per-step         one output per step with per_step=True, (B, L, output_size), finite
  padding          each series' output is the same alone and padded at the end as a longer batch
                   pads it (per-step: at its own steps), so padding never leaks into a shorter series;
                   to 1e-4, or a model's own solver tolerance (`rtol`, `atol` attributes) if larger
  causality        per step, with the arguments a per-step task trains (the reference, or the family's
                   causal variant of it: SequenceModel.causal_arguments), in float64: changing the
                   inputs after step i (values and times) leaves every output up to step i unchanged
                   to 1e-6, for each i; a family that declares it reads later steps
                   (SequenceModel.reads_later_steps) gets that reported instead (issue 30)
  training step    one Adam step on the loss ctsweep trains with is finite and changes the weights
  MLflow model     saved as the MLflow pyfunc model ctsweep registers, reloaded in a fresh process
                   outside the project (the module travels with the model), predicts the same

The family's module is imported before any check (when params.yaml is read: pipeline/models/user.py),
tried first in a separate interpreter within CTSWEEP_IMPORT_TIMEOUT seconds: a module that raises,
calls sys.exit, crashes or hangs when imported is one line and exit status 2, before any check.
Inside a check, whatever the family's code raises, sys.exit and KeyboardInterrupt included, is
that check's FAIL line; the other checks still run.
"""

from __future__ import annotations

import contextlib
import logging
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np
import torch

from pipeline.data.contract import Meta
from pipeline.errors import ConfigError, excerpt
from pipeline.models.user import USER_CODE_ERRORS

LENGTHS = (10, 7, 4, 10, 2, 6)
CHANNELS, CLASSES = 3, 3
_BAR = "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR"
EXTRA_PADDING = 3  # steps of padding added beyond the longest series
TOLERANCE = 1e-4  # float32 outputs of the same row computed in two batch shapes
CAUSAL_TOLERANCE = 1e-6  # float64 outputs up to step i, before and after the inputs after step i change


@dataclass(frozen=True)
class Check:
    name: str
    passed: bool
    detail: str = ""

    def line(self) -> str:
        return f"{'PASS' if self.passed else 'FAIL'}  {self.name}" + (f": {self.detail}" if self.detail else "")


def synthetic_batch(seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """x (6, 10, 3) NaN where missing or padded, t (6, 10) increasing then repeated, mask (6, 10)."""
    rng = np.random.default_rng(seed)
    n, length = len(LENGTHS), max(LENGTHS)
    x = rng.normal(size=(n, length, CHANNELS)).astype(np.float32)
    x[rng.random(x.shape) < 0.1] = np.nan  # missing values inside the series
    t = np.cumsum(rng.uniform(0.1, 1.0, size=(n, length)), axis=1).astype(np.float32)
    mask = np.arange(length)[None, :] < np.asarray(LENGTHS)[:, None]
    for i, k in enumerate(LENGTHS):
        x[i, k:], t[i, k:] = np.nan, t[i, k - 1]
        x[i, np.isnan(x[i]).all(axis=1) & mask[i], 0] = 0.0  # every observed step observes a channel
    return torch.from_numpy(x), torch.from_numpy(t), torch.from_numpy(mask)


def pad(x: torch.Tensor, t: torch.Tensor, mask: torch.Tensor, length: int) -> tuple[torch.Tensor, ...]:
    """(B, k, C), (B, k), (B, k) padded at the end to `length` steps as the data contract pads:
    NaN values, the last time repeated, mask False."""
    extra = length - x.shape[1]
    return (torch.cat([x, x.new_full((x.shape[0], extra, x.shape[2]), float("nan"))], dim=1),
            torch.cat([t, t[:, -1:].expand(-1, extra)], dim=1),
            torch.cat([mask, mask.new_zeros(mask.shape[0], extra)], dim=1))


def _meta(per_step: bool) -> Meta:
    return Meta(name="check", task="classification", per_step=per_step, output_size=CLASSES, metric="accuracy",
                channels=[f"c{i}" for i in range(CHANNELS)], source="ctsweep check-family synthetic batch",
                norm_mean=[0.0] * CHANNELS, norm_std=[1.0] * CHANNELS, classes=[f"k{i}" for i in range(CLASSES)])


class _Contract:
    """The family's class and arguments, and the checks run in order (a later one may need an earlier)."""

    def __init__(self, root: Path, family: str) -> None:
        from pipeline.models import get_model_class

        self.root, self.family = root, family
        try:
            self.cls = get_model_class(family)
        except KeyError as exc:
            raise ConfigError(f"{exc.args[0]} (a family of your own is declared under `user_families` in "
                              f"{root / 'params.yaml'}, or by a `ctsweep.families` entry point)") from None
        self.kwargs: dict[str, Any] = {}
        self.x, self.t, self.mask = synthetic_batch()

    def model(self, per_step: bool) -> torch.nn.Module:
        torch.manual_seed(0)
        return self.cls(input_channels=CHANNELS, output_size=CLASSES, per_step=per_step, **self.kwargs).eval()

    def inputs(self, x: torch.Tensor, t: torch.Tensor, mask: torch.Tensor) -> dict[str, torch.Tensor]:
        return self.cls.prepare_inputs(x, t, mask, **self.kwargs)

    def representation(self) -> str:
        if not isinstance(self.cls.representation, str) or not self.cls.representation:
            raise AssertionError(f"representation is {self.cls.representation!r}; allowed: a name such as 'raw' "
                                 "or 'interp' (pipeline/models/base.py)")
        inputs = self.inputs(self.x, self.t, self.mask)
        if set(inputs) != set(self.cls.input_keys):
            raise AssertionError(f"prepare_inputs returns {sorted(inputs)} but forward takes {list(self.cls.input_keys)}")
        bad = [k for k, v in inputs.items() if not isinstance(v, torch.Tensor) or v.shape[:1] != (len(LENGTHS),)]
        if bad:
            raise AssertionError(f"inputs {bad} are not tensors with one row per sequence ({len(LENGTHS)}) along dim 0")
        return f"{self.cls.representation!r}, inputs {list(self.cls.input_keys)}"

    def space(self) -> str:
        from pipeline.spaces import load_space, space_path, split_config

        path = space_path(self.root, self.family)
        if not path.is_file():
            raise AssertionError(f"no search-space file {path} (`ctsweep new-family` writes one)")
        space = load_space(path, self.family)
        self.kwargs = split_config({**space.fixed, **space.reference})[1]
        return f"{path} ({len(space.params)} searched; checks use its reference {self.kwargs})"

    def per_sequence(self) -> str:
        return self._shape(per_step=False)

    def per_step(self) -> str:
        return self._shape(per_step=True)

    def _shape(self, per_step: bool) -> str:
        with torch.no_grad():
            out = self.model(per_step)(**self.inputs(self.x, self.t, self.mask))
        want = (len(LENGTHS), max(LENGTHS), CLASSES) if per_step else (len(LENGTHS), CLASSES)
        if tuple(out.shape) != want:
            raise AssertionError(f"output shape {tuple(out.shape)}; expected {want}")
        if not torch.isfinite(out).all():
            raise AssertionError("outputs are not all finite")
        return f"{want}"

    def padding(self) -> str:
        worst = 0.0
        for per_step in (False, True):
            model = self.model(per_step)
            # An adaptive solver's step control reads the whole state, padded steps included (torchdiffeq's
            # RMS norm), so its steps, and the output within the solver's own tolerance, may move.
            allowed = max(TOLERANCE, *(float(getattr(model, k, 0.0) or 0.0) for k in ("rtol", "atol")))
            for i, k in enumerate(LENGTHS):
                own = (self.x[i:i + 1, :k], self.t[i:i + 1, :k], self.mask[i:i + 1, :k])
                with torch.no_grad():  # the series alone, then the same series padded to a longer batch's length
                    alone = model(**self.inputs(*own))[0]
                    padded = model(**self.inputs(*pad(*own, max(LENGTHS) + EXTRA_PADDING)))[0]
                padded = padded[:k] if per_step else padded
                gap = (alone - padded).abs().max().item()
                worst = max(worst, gap)
                if not gap <= allowed * (1 + alone.abs().max().item()):
                    kind = "per-step" if per_step else "per-sequence"
                    raise AssertionError(f"series {i} ({k} steps): its {kind} output moves by {gap:.3g} when padded "
                                         f"to {max(LENGTHS) + EXTRA_PADDING} steps; padding must not change it")
        return f"largest change {worst:.2g}"

    def causality(self) -> str:
        from pipeline.models.base import causal_variant

        kwargs = causal_variant(self.cls, self.kwargs) or self.kwargs  # what a per-step task trains
        declared = self.cls.reads_later_steps(kwargs)
        changed = [k for k in kwargs if k not in self.kwargs or kwargs[k] != self.kwargs[k]]
        trained = f" (as per-step tasks train it: {', '.join(f'{k} {kwargs[k]}' for k in changed)})" if changed else ""
        cut, gap = later_step_change(self.cls, kwargs, self.x, self.t, self.mask)
        seen = f"largest change of an output up to step i when inputs after i change: {gap:.2g}"
        if declared is not None:
            return f"declared: reads later steps ({declared}); {seen}{trained}"
        if gap > CAUSAL_TOLERANCE:
            raise AssertionError(f"the per-step output at step {cut} moves by {gap:.3g} when the inputs after step {cut} "
                                 f"change{trained}; it must read no later input, or the class must say it does "
                                 f"(`causal = False`, or reads_later_steps: pipeline/models/base.py)")
        return seen + trained

    def training_step(self) -> str:
        from pipeline.training.loop import loss_fn

        model = self.model(per_step=False).train()
        inputs = self.inputs(self.x, self.t, self.mask)
        y = torch.arange(len(LENGTHS)) % CLASSES
        before = [p.detach().clone() for p in model.parameters()]
        if not before:
            raise AssertionError("the model has no parameters")
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
        loss = loss_fn(_meta(False), model(**inputs), y, self.mask)
        if not torch.isfinite(loss):
            raise AssertionError(f"the loss is {loss.item()}")
        loss.backward()
        optimizer.step()
        if all(torch.equal(b, p) for b, p in zip(before, model.parameters())):
            raise AssertionError("one optimiser step changed no weight (no gradient reaches them)")
        return f"loss {loss.item():.4f}"

    def mlflow_model(self) -> str:
        from pipeline.serving.pyfunc import predict_arrays, save_checkpoint, save_pyfunc

        model, meta = self.model(per_step=False), _meta(False)
        want = predict_arrays(model, meta, self.family, self.kwargs, self.x.numpy(), self.t.numpy(), self.mask.numpy())
        with tempfile.TemporaryDirectory(prefix="ctsweep-check-") as tmp:
            folder = Path(tmp)
            save_checkpoint(folder / "checkpoint.pt", self.family, self.kwargs, CHANNELS, model.state_dict(), meta)
            with _quiet("mlflow"):  # its notes on pickling and signatures are about ctsweep's wrapper, not this family
                save_pyfunc(folder / "model", folder / "checkpoint.pt", self.family)
            np.savez(folder / "batch.npz", x=self.x.numpy(), t=self.t.numpy(), mask=self.mask.numpy())
            got = _predict_elsewhere(folder)
        gap = float(np.abs(got - want).max())
        if not gap <= TOLERANCE:
            raise AssertionError(f"the reloaded model's predictions differ by {gap:.3g}")
        return f"reloaded in a fresh process, predictions equal to {gap:.2g}"


def later_step_change(cls: type, kwargs: dict[str, Any], x: torch.Tensor, t: torch.Tensor,
                      mask: torch.Tensor) -> tuple[int, float]:
    """(i, change): the largest change of a per-step output at steps <= i when the inputs after
    step i change, relative to 1 + |output|, in float64, over i = 0, 1, L // 2, L - 3 and L - 2
    (the first step reads the path's start, X'(0) say; windows and gaps span several steps, so a
    few cuts find them at a third of the cost of every one); i the step where it is largest.

    x (B, L, C) NaN where missing, t (B, L), mask (B, L). After step i every observed value gets
    N(0, 1) noise and every time (padding too, which repeats the last) moves 0.5 later, so the
    order of times and what is missing stay as they were.
    """
    torch.manual_seed(0)
    model = cls(input_channels=x.shape[2], output_size=CLASSES, per_step=True, **kwargs).double().eval()
    x, t = x.double(), t.double()
    noise = torch.randn(x.shape, generator=torch.Generator().manual_seed(1), dtype=x.dtype)
    with torch.no_grad():
        base = model(**cls.prepare_inputs(x, t, mask, **kwargs))  # (B, L, O)
        scale = 1.0 + base[mask].abs().max().item()
        worst = (0, 0.0)
        length = x.shape[1]
        for cut in sorted({c for c in (0, 1, length // 2, length - 3, length - 2) if 0 <= c < length - 1}):
            later_x, later_t = x.clone(), t.clone()
            later_x[:, cut + 1:] += noise[:, cut + 1:]  # NaN stays NaN
            later_t[:, cut + 1:] += 0.5
            moved = model(**cls.prepare_inputs(later_x, later_t, mask, **kwargs))
            gap = (moved - base)[:, : cut + 1][mask[:, : cut + 1]].abs().max().item() / scale
            worst = max(worst, (cut, gap), key=lambda w: w[1])
    return worst


@contextlib.contextmanager
def _quiet(logger: str) -> Iterator[None]:
    log, bar = logging.getLogger(logger), os.environ.get(_BAR)
    level = log.level
    log.setLevel(logging.ERROR)
    os.environ[_BAR] = "false"  # MLflow's progress bar of the artifact copy
    try:
        yield
    finally:
        log.setLevel(level)
        if bar is None:
            os.environ.pop(_BAR, None)
        else:
            os.environ[_BAR] = bar


# Runs in a fresh interpreter in an empty folder, without the project on sys.path or the
# families params.yaml declares: what `mlflow models serve` on another machine would have.
_RELOAD = """
import sys, numpy as np, mlflow.pyfunc
folder = sys.argv[1]
batch = np.load(folder + "/batch.npz")
out = mlflow.pyfunc.load_model(folder + "/model").predict({k: batch[k] for k in ("x", "t", "mask")})
np.save(folder + "/out.npy", np.asarray(out))
"""


def _predict_elsewhere(folder: Path) -> np.ndarray:
    from pipeline.models.user import ENV

    env = {**{k: v for k, v in os.environ.items() if k not in (ENV, "PYTHONPATH")},
           _BAR: "false"}
    done = subprocess.run([sys.executable, "-c", _RELOAD, str(folder)], cwd=folder, env=env,
                          capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise AssertionError(f"reloading the saved model in a fresh process failed: {last}")
    return np.load(folder / "out.npy")


CHECKS: tuple[tuple[str, str], ...] = (
    ("representation", "representation"), ("search space", "space"), ("per-sequence output", "per_sequence"),
    ("per-step output", "per_step"), ("padding", "padding"), ("causality", "causality"),
    ("training step", "training_step"),
    ("MLflow model", "mlflow_model"),
)


def check_family(root: Path, family: str, say: Callable[[str], None] = lambda line: None) -> list[Check]:
    """Run every check on `family` (registered, or declared in root/params.yaml); `say` gets each line."""
    contract = _Contract(root, family)
    results = []
    for name, method in CHECKS:
        try:
            result = Check(name, True, getattr(contract, method)())
        except USER_CODE_ERRORS as exc:  # the family's code may raise anything, sys.exit too: the check's finding
            reason = str(exc) if isinstance(exc, AssertionError) else f"{type(exc).__name__}: {exc}"
            if isinstance(exc, SystemExit):
                reason = f"the family's code called sys.exit({excerpt(exc.code)}); it must not end the process"
            result = Check(name, False, _shortened(" ".join(reason.split()).rstrip(":")))
        results.append(result)
        say(result.line())
    return results


def _shortened(reason: str, limit: int = 500) -> str:
    """A check's reason cut to `limit` characters, saying how long it was."""
    return reason if len(reason) <= limit else f"{reason[:limit]}... ({len(reason)} characters)"


def summary(results: list[Check]) -> str:
    failed = [r.name for r in results if not r.passed]
    return (f"{len(results) - len(failed)} of {len(results)} checks passed"
            + (f"; failed: {', '.join(failed)}" if failed else ""))


__all__ = ["CHECKS", "Check", "check_family", "later_step_change", "summary", "synthetic_batch"]
