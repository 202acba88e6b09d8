"""Trained models served: a checkpoint wrapped as an MLflow pyfunc model (pyfunc.py), loadable
from the registry as `models:/ctsweep-<dataset>@champion`, and `ctsweep predict` on a file of
series (series.py reads it, file_checks.py vets the input and `--out` paths, screening.py refuses
what the model cannot have been trained on, outputs.py turns outputs into labelled rows and
documents the model, predict.py loads the model and writes the predictions). The CLI and the
pyfunc model's `predict` screen, refuse and label through the same functions.

Imports: errors, names, stores, models, data, training.
SequenceClassifierModel is re-exported: every model registered before the package was grouped
by concept names it as pipeline.serving.SequenceClassifierModel in its python_model.pkl.
"""

from pipeline.serving.pyfunc import SequenceClassifierModel

__all__ = ["SequenceClassifierModel"]
