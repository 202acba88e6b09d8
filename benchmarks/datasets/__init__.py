"""The prepare stage at each source's full size: wall time and peak memory (prepare.py)."""
