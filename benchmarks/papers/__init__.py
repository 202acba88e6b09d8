"""Papers' tables reproduced: a paper's table beside ours with a verdict per row (paper_table.py),
what a paper profile costs on one core (profile_cost.py), how much of a per-step regression
family's test score comes from reading the next step (next_step_leak.py), temporal weights'
cost per batch against the plain latent ODE (tw_ratio.py), and a long reproduction's finished
seeds kept across days (run_state.py)."""
