"""How busy the search driver keeps a 32-slot cluster (run.py). The shared parts (the workload, the
synthetic trial, the one-dataset modes and the fill's arithmetic) are in workload.py, which the modes
over several datasets (datasets.py) and over the stores (stores.py) import; report.py writes fill.md."""
