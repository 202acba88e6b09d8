"""Train the chosen classical model and predict the test split, in a child process with a time limit.

The child runs on one core (aeon's n_jobs=1 for its numba kernels, threadpoolctl's limit of one
thread for the BLAS under MiniRocket's ridge regression and the one-step models), so the training
time it reports is a one-core figure and the reference never takes a core from a search running
beside it. A child that outlives the limit is killed: the reference is then "failed" with the
reason, as is a model that raises. Its seed is fixed (MiniRocket's random kernels; the others
draw nothing).
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from pipeline.classical.choice import DTW, LOGISTIC, MINIROCKET, ONE_STEP, RIDGE, RIDGE_ALPHAS, Choice


@dataclass(frozen=True)
class Fitted:
    """What the child sends back: the training seconds and the test split's outputs, one row per
    series (N) or, for the one-step models, per observed step (S): a classifier's class
    probabilities, (N or S, K) with the columns in the order of `classes` (the labels seen in
    training); the ridge regression's predictions, (S, O), `classes` empty."""

    seconds: float
    outputs: np.ndarray
    classes: list[int]


def _classifier(name: str, seed: int):
    if name == MINIROCKET:
        from aeon.classification.convolution_based import MiniRocketClassifier

        return MiniRocketClassifier(n_jobs=1, random_state=seed)
    if name == DTW:
        from aeon.classification.distance_based import KNeighborsTimeSeriesClassifier

        return KNeighborsTimeSeriesClassifier(n_neighbors=1, distance="dtw", n_jobs=1)
    if name == RIDGE:
        from sklearn.linear_model import RidgeCV

        return RidgeCV(alphas=RIDGE_ALPHAS)
    if name == LOGISTIC:
        from sklearn.linear_model import LogisticRegression
        from sklearn.pipeline import make_pipeline
        from sklearn.preprocessing import StandardScaler

        # standardised inputs: channels in their own units beside the elapsed time slow lbfgs down
        return make_pipeline(StandardScaler(), LogisticRegression(max_iter=1000, random_state=seed))
    raise ValueError(f"unknown classical model {name!r}; valid: {MINIROCKET}, {DTW}, {RIDGE}, {LOGISTIC}")


def _first_line(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {(str(exc).splitlines() or [''])[0]}".rstrip(": ")


def _warm_up(choice: Choice, seed: int) -> None:
    """Fit and predict on a few series first: aeon's numba kernels compile on first use (26 s for
    MiniRocket on GunPoint on this project's 2-core machine, against 0.1 s for its fit once compiled), and the
    training time reported is the classifier's, not the compiler's."""
    first = [int(i) for i in np.unique(choice.y_train, return_index=True)[1]]
    few = sorted(set(first) | set(range(min(8, len(choice.y_train)))))
    pick = (lambda x: x[few]) if isinstance(choice.train, np.ndarray) else (lambda x: [x[i] for i in few])
    model = _classifier(choice.classifier, seed)
    model.fit(pick(choice.train), choice.y_train[few])
    model.predict_proba(pick(choice.train))


def _fit(choice: Choice, seed: int) -> Fitted | str:
    """Fit and predict in this process, on one thread; a Fitted or the error's first line."""
    try:
        from threadpoolctl import threadpool_limits

        with threadpool_limits(limits=1):
            if choice.classifier not in ONE_STEP:  # nothing compiled on first use there
                _warm_up(choice, seed)
            model = _classifier(choice.classifier, seed)
            start = time.perf_counter()
            model.fit(choice.train, choice.y_train)
            seconds = time.perf_counter() - start
            if choice.classifier == RIDGE:
                predicted = np.asarray(model.predict(choice.test), dtype=np.float64)
                return Fitted(seconds, predicted.reshape(len(predicted), -1), [])
            proba = np.asarray(model.predict_proba(choice.test), dtype=np.float64)
        return Fitted(seconds, proba, [int(c) for c in model.classes_])  # a Pipeline's: its last step's
    except Exception as exc:  # noqa: BLE001 -- any failure of the classifier is reported, not raised
        return _first_line(exc)


def fit_predict(choice: Choice, seed: int, time_limit_s: float) -> Fitted | str:
    """Fit and predict in a child process (`python -m pipeline.classical.fit`: nothing of this
    process is copied into it, and it can be killed); returns the Fitted, or one line saying why
    there is none (the classifier's error, the time limit, a child that died). The choice goes to
    the child and the answer comes back as pickles in a private temporary folder."""
    with tempfile.TemporaryDirectory(prefix="ctsweep-classical-") as tmp:
        job, answer = Path(tmp) / "job.pkl", Path(tmp) / "answer.pkl"
        job.write_bytes(pickle.dumps((choice, seed), protocol=pickle.HIGHEST_PROTOCOL))
        child = subprocess.Popen([sys.executable, "-m", "pipeline.classical.fit", str(job), str(answer)],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=_one_core_env())
        try:
            _, err = child.communicate(timeout=time_limit_s)
        except subprocess.TimeoutExpired:
            child.kill()
            child.communicate()
            return f"{choice.classifier} exceeded its time limit of {time_limit_s:g} s (`classical.time_limit_s`)"
        if not answer.is_file():  # killed, out of memory, or an import that failed
            last = (err.decode(errors="replace").strip().splitlines() or [""])[-1]
            return f"{choice.classifier}'s process ended without a result (exit code {child.returncode}) {last}".strip()
        return pickle.loads(answer.read_bytes())


def _one_core_env() -> dict[str, str]:
    """The child's environment: one thread for numba and the BLAS from the start (threadpoolctl
    then holds the BLAS at one; numba's pool is sized when it first runs)."""
    return {**os.environ, "NUMBA_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1",
            "MKL_NUM_THREADS": "1"}


def _main(job: str, answer: str) -> None:
    choice, seed = pickle.loads(Path(job).read_bytes())
    Path(answer).write_bytes(pickle.dumps(_fit(choice, seed), protocol=pickle.HIGHEST_PROTOCOL))


if __name__ == "__main__":  # by its module name, so that what it pickles names this module, not __main__
    from pipeline.classical.fit import _main as main

    main(*sys.argv[1:3])
