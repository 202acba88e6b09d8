"""The model zoo's cost: seconds per epoch and memory of every family on synthetic data (run.py, each
measurement in a process of its own: measure.py, on data.py's dataset, rendered by render.py), and one
family's epoch before and after a change (speedup.py)."""
