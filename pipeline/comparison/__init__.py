"""What is best and whether it is decided: the statistics the search, the final stage and the
report share, so that each decides by the same rule.

    ties.py           the best family on validation and the families tied with it (exact counts)
    pairs.py          a family against the best: Welch's t-test, TOST, Holm; `decide`
    expected_best.py  the expected best of n search trials (Dodge et al. 2019)

Imports: runtime (the collector around statsmodels' Holm; numpy, scipy, statsmodels besides).
Import-free: import the module you need (`from pipeline.comparison.ties import best_family`).
"""
