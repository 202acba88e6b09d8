"""Trials packed per GPU and the fill of a GPU's slots (run.py), and the training loop on one CUDA
device without Ray or MLflow (trainer.py)."""
