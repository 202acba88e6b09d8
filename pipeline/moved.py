"""Old import paths of modules that moved when the package was grouped by concept (issue 27).

Pickles name classes by module path: MLflow's python_model.pkl of a registered model, Ray Tune's
experiment state (the searcher, its search spaces), a user's family importing a helper. A finder
on sys.meta_path maps each old path below to the module that now holds the code, so `import
pipeline.train` (or an unpickled `pipeline.protocol.TrainSettings`) gives `pipeline.training.loop`
(`pipeline.config.protocol`) itself, the same module object, not a copy.

Old modules whose name a new subpackage took keep working through that package's re-exports
instead: pipeline.config (Params, load_params, the dataset kinds' params), pipeline.spaces
(load_space, SearchSpace, ...), pipeline.serving (SequenceClassifierModel, which every registered
model's pickle names), pipeline.cli (app, main), pipeline.models.cfc (CfC, CfCNoGate, CfS,
CfCMMRNN), pipeline.models.cdr_nde (CDRNDE, CDRNDEHeat), pipeline.models.temporal_weights (the
Eq. 2 classes). pipeline.final's functions moved to pipeline.final.stage; nothing saved names them.

Imports: nothing of pipeline (it is installed by pipeline/__init__.py, before anything else).
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
from types import ModuleType

MOVED: dict[str, str] = {
    "pipeline.data.imdb": "pipeline.data.kinds.imdb",
    "pipeline.data.person_activity": "pipeline.data.kinds.person_activity",
    "pipeline.data.physionet2012": "pipeline.data.kinds.physionet2012",
    "pipeline.data.sepsis": "pipeline.data.kinds.sepsis",
    "pipeline.data.speech_commands": "pipeline.data.kinds.speech_commands",
    "pipeline.data.uea": "pipeline.data.kinds.uea",
    "pipeline.data.walker2d": "pipeline.data.kinds.walker2d",
    "pipeline.data.xor": "pipeline.data.kinds.xor",
    "pipeline.data.local": "pipeline.data.kinds.local",
    "pipeline.data.local.dataset": "pipeline.data.kinds.local.dataset",
    "pipeline.data.local.files": "pipeline.data.kinds.local.files",
    "pipeline.data.local.long_csv": "pipeline.data.kinds.local.long_csv",
    "pipeline.data.local.npz": "pipeline.data.kinds.local.npz",
    "pipeline.allocator": "pipeline.runtime.allocator",
    "pipeline.interrupts": "pipeline.runtime.interrupts",
    "pipeline.io": "pipeline.stores.files",
    "pipeline.paths": "pipeline.stores.paths",
    "pipeline.locks": "pipeline.stores.locks",
    "pipeline.staging": "pipeline.stores.staging",
    "pipeline.staleness": "pipeline.stores.staleness",
    "pipeline.storage": "pipeline.stores.ray_storage",
    "pipeline.tracking": "pipeline.stores.tracking",
    "pipeline.schema": "pipeline.stores.schema",
    "pipeline.dataset_params": "pipeline.config.datasets",
    "pipeline.params_base": "pipeline.config.base",
    "pipeline.yaml_load": "pipeline.config.yaml_load",
    "pipeline.arguments": "pipeline.config.arguments",
    "pipeline.protocol": "pipeline.config.protocol",
    "pipeline.train": "pipeline.training.loop",
    "pipeline.metrics": "pipeline.training.metrics",
    "pipeline.predict": "pipeline.serving.predict",
    "pipeline.screening": "pipeline.serving.screening",
    "pipeline.final_seeds": "pipeline.final.seeds",
    "pipeline.final_resume": "pipeline.final.resume",
    "pipeline.promote": "pipeline.registry.promote",
    "pipeline.check": "pipeline.cli.check",
    "pipeline.families.user": "pipeline.models.user",
    "pipeline.models._cde": "pipeline.models.blocks.cde",
    "pipeline.models.embedding": "pipeline.models.blocks.embedding",
    "pipeline.models.logsig": "pipeline.models.blocks.logsig",
    "pipeline.models._cfc_cells": "pipeline.models.cfc.cells",
    "pipeline.models.ltc": "pipeline.models.cfc.ltc",
    "pipeline.models.cdr_rate": "pipeline.models.cdr_nde.depth_rate",
    "pipeline.models._fwp": "pipeline.models.fast_weights.programmer",
    "pipeline.models.fwp_rules": "pipeline.models.fast_weights.rules",
    "pipeline.models.node_fwp": "pipeline.models.fast_weights.node",
    "pipeline.models.cde_fwp": "pipeline.models.fast_weights.cde",
    "pipeline.models.rde": "pipeline.models.fast_weights.rde",
    "pipeline.models.rde_node_fwp": "pipeline.models.fast_weights.rde_node",
    "pipeline.models.tw_fused": "pipeline.models.temporal_weights.fused",
    "pipeline.models.tw_stages": "pipeline.models.temporal_weights.stages",
    "pipeline.models.tw_models": "pipeline.models.temporal_weights.ode_models",
    "pipeline.models.latent_ode": "pipeline.models.temporal_weights.latent_ode",
    "pipeline.models.ncde": "pipeline.models.neural_de.ncde",
    "pipeline.models.nrde": "pipeline.models.neural_de.nrde",
    "pipeline.models.ode_rnn": "pipeline.models.neural_de.ode_rnn",
    "pipeline.models.gru_ode": "pipeline.models.neural_de.gru_ode",
    "pipeline.models.ct_rnn": "pipeline.models.neural_de.ct_rnn",
    "pipeline.models.ode_lstm": "pipeline.models.neural_de.ode_lstm",
    "pipeline.models.gru_d": "pipeline.models.discrete.gru_d",
    "pipeline.models.lstm_dt": "pipeline.models.discrete.lstm_dt",
}


class _Alias(importlib.abc.Loader):
    """Loads an old path as the module that replaced it (sys.modules[old] is the new module)."""

    def __init__(self, new: str) -> None:
        self.new = new

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> None:
        return None  # a placeholder module; exec_module replaces it

    def exec_module(self, module: ModuleType) -> None:
        # importlib returns whatever sys.modules holds under the name once exec_module returns,
        # so the caller gets the new module itself and its __spec__ and __name__ stay untouched.
        sys.modules[module.__name__] = importlib.import_module(self.new)


class _MovedFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname: str, path: object = None, target: object = None) -> importlib.machinery.ModuleSpec | None:
        new = MOVED.get(fullname)
        return None if new is None else importlib.machinery.ModuleSpec(fullname, _Alias(new))


def install() -> None:
    """Put the finder on sys.meta_path once per process."""
    if not any(isinstance(finder, _MovedFinder) for finder in sys.meta_path):
        # First, not last: an old package path (pipeline.data.local) resolves to the new package,
        # whose __path__ would otherwise let the path finder load `pipeline.data.local.npz` a
        # second time, as a copy under the old name. It answers only the names in MOVED.
        sys.meta_path.insert(0, _MovedFinder())
