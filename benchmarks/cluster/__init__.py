"""The pipeline's overhead over a plain training loop and its trials per hour (run.py, its report:
report.py), where a pass's CPU time goes (cpu_account.py), a one-slot search's time trial by trial
(trial_timeline.py), what a trial process spends before its first batch (trial_startup.py) and
the garbage collector inside a trial (collector.py)."""
