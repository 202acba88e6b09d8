"""The final stage's budget and validation: is the budget long enough for the searched best
configurations (convergence.py), and which validation and how long on small datasets (small_data.py)."""
