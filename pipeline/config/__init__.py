"""params.yaml: each stage's section and each dataset kind's, loaded strictly (unknown keys and
wrong types are one-line errors naming the file and key), and the training protocol a search
space may set.

    params.py     the stages' sections (search, final, promote, resources) and load_params
    datasets.py   the `prepare.<dataset>` sections, one model per dataset `kind`
    base.py       what both share: strict models, names, seeds
    yaml_load.py  YAML read with one-line errors (duplicate keys, anchors, sizes)
    arguments.py  YAML values checked against the model argument or setting they become
    protocol.py   the training protocol: optimiser, schedule, clipping, class weights, stopping
    limits.py     bounds on well-typed values that cannot do their job: split sizes, trial time
                  limits, lr factors (issue 31)
    dvc_params.py the keys dvc.yaml's stages list under `params:`, checked before DVC reaches them

Imports: errors, names, models.
The package re-exports what the stages use (`from pipeline.config import load_params, Params`).
"""

from pipeline.config.datasets import (
    ImdbParams, LocalParams, PersonActivityParams, Physionet2012Params, PrecomputeSpec, SepsisParams,
    SpeechCommandsParams, UeaParams, Walker2dParams, XorParams,
)
from pipeline.config.params import (
    AshaParams, ClassicalParams, FinalParams, Params, PromoteParams, ResourceOverride, Resources, SearchParams,
    dataset_params, load_params, params_from, read_yaml,
)

__all__ = [
    "AshaParams", "ClassicalParams", "FinalParams", "ImdbParams", "LocalParams", "Params", "PersonActivityParams",
    "Physionet2012Params", "PrecomputeSpec", "PromoteParams", "ResourceOverride", "Resources", "SearchParams", "SepsisParams",
    "SpeechCommandsParams", "UeaParams", "Walker2dParams", "XorParams", "dataset_params", "load_params",
    "params_from", "read_yaml",
]
