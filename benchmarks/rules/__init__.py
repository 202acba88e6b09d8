"""The rules the search and the final stage decide by, checked: the selection rule for search trials
(selection_rule.py), Optuna's terminator against the saturation rule (terminator_compare.py), the
race's error rates (race_error.py) and the trials fANOVA needs (importance.py)."""
