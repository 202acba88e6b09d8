"""Search spaces: YAML data compiled to an Optuna define-by-run function for OptunaSearch.

    search_spaces/<family>.yaml
        reference:  the paper's configuration, evaluated first (active params only); or, where
                    the paper's differs by dataset, {default: {...}, <dataset>: {...}, ...}
                    with each dataset's entry merged over `default`
        params:     name -> {distribution: loguniform|uniform|int|categorical, low, high,
                             step, log, choices, when: {other_param: value or [values]}}
        fixed:      name -> value, passed as is; or per dataset, as for `reference` (a class
                    weight for one dataset, say)

Every key is a training key (TRAINING_KEYS, pipeline/config/protocol.py) or a keyword argument of the
family's model class. A training key that only some optimisers or schedules use must be fixed
with them or searched under a `when` on them (`momentum: {..., when: {optimizer: rmsprop}}`).
Parsing is strict, and every error is one line naming the file, the key and what is allowed,
raised before Ray starts: unknown keys, a family name (the file's stem) that is not an
identifier, `step` that is not a positive integer dividing high - low (or given with `log`,
which Optuna refuses), `log` that is not true/false, non-finite bounds, empty or non-scalar
choices, a `when`/`params`/`fixed`/`reference` that is not a mapping, out-of-range reference
values, a learning rate that is not log-uniform, and values of the wrong type for the model
argument or training setting they become (pipeline/config/arguments.py): `batch_size: 0` fails here,
not in every trial a minute later. What only the model knows (`hidden_size: -32`) is checked by
building it at the space's corners before a search starts (corners.py, issue 31).

    space.py    ParamSpec and SearchSpace, the define-by-run function, split_config
    parse.py    the file's keys parsed and checked, one line per problem
    checks.py   checks across keys: the reference, the protocol's combinations, per dataset
    corners.py  check_corners: the model built and run at the reference and the space's corners
    load.py     load_space (a file -> a checked SearchSpace) and space_path
    causal.py   causal_space: on a per-step dataset, no value of the space reads later steps

Imports: errors, names, models, config.
"""

from pipeline.config.arguments import TRAINING_KEYS
from pipeline.spaces.causal import causal_space
from pipeline.spaces.checks import check_for_dataset, patience_note
from pipeline.spaces.corners import check_corners
from pipeline.spaces.load import load_space, space_path
from pipeline.spaces.overrides import fix_values
from pipeline.spaces.space import ParamSpec, SearchSpace, _sample, split_config  # noqa: F401  _sample: see below

# _sample is what SearchSpace.define_by_run wraps; Ray Tune pickles it into a search's experiment
# state, and states saved before the split name it pipeline.spaces._sample (pipeline/moved.py).

__all__ = ["ParamSpec", "SearchSpace", "TRAINING_KEYS", "causal_space", "check_corners", "check_for_dataset",
           "fix_values", "load_space", "patience_note", "space_path", "split_config"]
