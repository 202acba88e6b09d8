"""Papers' tables reproduced: a paper's table beside ours with a verdict per row (paper_table.py),
what a paper profile costs on one core (profile_cost.py), and how much of a per-step regression
family's test score comes from reading the next step (next_step_leak.py)."""
