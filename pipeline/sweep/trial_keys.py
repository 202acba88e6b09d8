"""The bookkeeping keys a search trial's config carries beside what its space proposed, and the
helpers that read them: its family, its search repeat and its number in the unit's Optuna study
(pipeline.sweep.families explains units and rounds).

Standard library only: a trial process reads its config with these, and importing the searcher's
module here would import Optuna into every trial process (40 ms of its start-up, for nothing).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

FAMILY_KEY = "family"  # the config key naming a trial's family; never a model or training argument
# The config key holding the trial's number in its unit's Optuna study (what optuna-dashboard
# shows as "Trial 3"), also the tag of the trial's run: its MLflow run name starts with it.
NUMBER_TAG = "optuna_trial_number"
REPEAT_TAG = "search_repeat"  # the config key and run tag holding the trial's search repeat (0 when repeats is 1)
TRIAL_NUMBER_KEY = NUMBER_TAG
REPEAT_KEY = REPEAT_TAG
BOOKKEEPING = (FAMILY_KEY, TRIAL_NUMBER_KEY, REPEAT_KEY)


def family_of(config: Mapping[str, Any]) -> str:
    """The family a trial belongs to (its config as Tune holds it)."""
    return str(config[FAMILY_KEY])


def repeat_of(config: Mapping[str, Any]) -> int:
    """The search repeat a trial belongs to (0 for a trial of an experiment started before repeats)."""
    return int(config.get(REPEAT_KEY, 0))


def trial_number_of(config: Mapping[str, Any]) -> int | None:
    """The trial's Optuna trial number, or None (a trial of an experiment started before it was kept)."""
    number = config.get(TRIAL_NUMBER_KEY)
    return None if number is None else int(number)


def without_family(config: Mapping[str, Any]) -> dict[str, Any]:
    """The trial's own configuration: what the family's search space proposed."""
    return {k: v for k, v in config.items() if k not in BOOKKEEPING}
