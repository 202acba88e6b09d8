"""What a user sees of the commands: how long a command takes to answer (startup.py), and how close the
progress display's estimate of the time left comes (progress_replay.py)."""
