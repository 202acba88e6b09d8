"""ctsweep: hyperparameter search for continuous-time sequence models (`ctsweep`, pipeline.cli).

The package is a stack of layers. A module may import modules of its own subpackage and of any
subpackage in a lower layer, never one in its own layer or above, lazily or not (under
`if TYPE_CHECKING:` too); LAYERS below is that order, lowest first, and tests/test_layout.py
checks every import of the package against it and against each subpackage's `Imports:` line.

    errors, names        the errors a user can act on; dataset and family names (never paths)
    runtime              the process a stage runs in: signals (SIGINT/SIGTERM), malloc settings
    stores               where things are kept: project paths, whole-file writes, locks, staged
                         outputs, staleness, the checked JSON records, Ray's storage, MLflow
    progress             a running stage's progress read from MLflow: the live table, plain lines
    models               the model zoo by lineage, and the family registry (user families too)
    config               params.yaml: each stage's section, the dataset kinds, training protocol
    data, spaces         fetch and prepare (the processed-dataset contract); search spaces
    training, profiles   the one training loop and metrics; the papers' reproduction profiles
    comparison           what is best and whether it is decided: ties, Welch, TOST, expected best
    serving              trained models as MLflow pyfunc models; `ctsweep predict`
    sweep, families      the search stage; checking and scaffolding a user's own family
    final                the final stage: the best configurations over fresh seeds
    classical            the classical reference: an aeon classifier on one core, beside the families
    reporting            the report stage: tables, plots, statistics, marks, `ctsweep status`
    registry             the promote stage: the MLflow Model Registry and alias `champion`
    cli                  `ctsweep`: one command per stage, `ctsweep check`

Data flows up the stack: params.yaml -> fetch/prepare (data) -> search (sweep) -> final -> report
(reporting) -> promote (registry), each stage reading the files the one before wrote (stores).
Modules that moved keep their old import path (pipeline/moved.py), so pickles and checkpoints
written before still load.
"""

import os as _os

from pipeline import moved as _moved

# MLflow's usage telemetry off in every process that imports ctsweep (the driver, Ray's trial
# processes, the final stage's seeds) before any of them imports MLflow, unless the user set it.
# Why: `import mlflow` starts a thread that fetches the telemetry config and, when it cannot (an
# offline cluster node, as this project's machines are), removes `_MLFLOW_TELEMETRY_SESSION_ID`
# from os.environ while the process may be iterating os.environ (requests reads the proxy
# settings on every call): a trial's first MLflow write failed with MlflowException
# "... failed with exception '_MLFLOW_TELEMETRY_SESSION_ID'" (a KeyError) in the fill benchmark,
# 2026-11-28 (MLflow 3.17.2, mlflow/telemetry/client.py _fetch_config). The tracking server
# (pipeline/stores/tracking_server.py) is started with it off too.
_os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")

# Lowest first. A unit is a subpackage or a top-level module; a module belongs to the longest
# unit its dotted name starts with. pipeline.models is split into its own layers: the lineages
# build on base and blocks and on the baselines, the zoo lists them, the registry sits on top.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("moved", "errors"),
    ("names",),
    ("runtime",),
    ("stores",),
    ("progress",),
    ("models.builtin",),
    ("models.base",),
    ("models.blocks",),
    ("models.discrete",),
    ("models.neural_de",),
    ("models.cfc", "models.cdr_nde", "models.fast_weights", "models.temporal_weights"),
    ("models.zoo",),
    ("models.user", "models.signatures"),
    ("models",),
    ("config",),
    ("data", "spaces"),
    ("training", "profiles"),
    ("comparison",),
    ("serving",),
    ("sweep", "families"),
    ("final",),
    ("classical",),
    ("reporting",),
    ("registry",),
    ("cli",),
)

_moved.install()
