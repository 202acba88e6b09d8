"""Reproduction profiles (pipeline/profiles): each loads over the project's params.yaml, validates,
fits every listed family's space on every listed dataset, and the first trial of each search (the
paper's reference for that dataset) trains one optimiser step on fixture data shaped like the
dataset (its task, channels, static channels, classes, tokens); plus `ctsweep profile` itself.

No profile is run here: they are for a GPU cluster and most of their data must be downloaded.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from pipeline import profiles
from pipeline.config import load_params, params_from, read_yaml
from pipeline.data.kinds import person_activity
from pipeline.data.kinds import physionet2012
from pipeline.data.kinds import speech_commands
from pipeline.data.kinds import walker2d
from pipeline.data.contract import Dataset, Meta, Split
from pipeline.data.kinds.sepsis import channel_names
from pipeline.errors import ConfigError
from pipeline.models import MODELS
from pipeline.spaces import TRAINING_KEYS, causal_space, check_for_dataset, fix_values, load_space, space_path, split_config
from pipeline.training.loop import Trainer, TrainSettings

ROOT = Path(__file__).resolve().parents[1]
PARAMS = ROOT / "params.yaml"
N, LENGTH = 8, 9


def _meta_fields(section) -> dict:
    """Meta fields of the dataset a prepare section builds (the data modules' own constants)."""
    kind = section.kind
    if kind == "xor":
        return dict(task="binary", per_step=False, output_size=1, metric="accuracy", channels=["bit"])
    if kind == "sepsis":
        channels, statics = channel_names(section.intensity)
        return dict(task="binary", per_step=section.task == "hourly", output_size=1, metric="auroc",
                    channels=channels, static_channels=statics)
    if kind == "physionet2012":
        return dict(task="binary", per_step=False, output_size=1, metric="auroc",
                    channels=physionet2012.TIME_SERIES + physionet2012.STATIC,
                    static_channels=list(physionet2012.STATIC))
    if kind == "speech_commands":
        return dict(task="classification", per_step=False, output_size=len(speech_commands.KEYWORDS),
                    metric="accuracy", channels=[f"mfcc{i}" for i in range(20)])
    if kind == "uea":  # EigenWorms: 6 eigenworm projections, 5 classes
        assert section.name == "EigenWorms", section.name
        return dict(task="classification", per_step=False, output_size=5, metric="accuracy",
                    channels=[f"dim{i}" for i in range(6)])
    if kind == "person_activity":
        rubanova = section.variant == "rubanova"
        return dict(task="classification", per_step=True, metric="accuracy",
                    output_size=len(person_activity.RUBANOVA_CLASSES if rubanova else person_activity.CLASSES),
                    channels=person_activity.RUBANOVA_CHANNELS if rubanova else person_activity.CHANNELS)
    if kind == "walker2d":
        return dict(task="regression", per_step=True, output_size=walker2d.STATE_DIM, metric="mse",
                    channels=list(walker2d.CHANNELS))
    if kind == "imdb":
        return dict(task="binary", per_step=False, output_size=1, metric="accuracy", channels=["token"],
                    vocab_size=50, embedding_size=16)
    raise AssertionError(f"no fixture for prepare kind {kind!r}: add one")


def fixture_dataset(name: str, section) -> Dataset:
    """N irregular, padded sequences shaped like dataset `name` (NaN-padded values, token ids for
    token datasets, the last channels static when the dataset has static channels)."""
    fields = _meta_fields(section)
    meta = Meta(name=name, source="test_profiles", **fields)
    rng = np.random.default_rng(0)
    lengths = np.array([9, 5, 3, 7, 9, 4, 6, 2])
    mask = np.arange(LENGTH)[None, :] < lengths[:, None]
    t = np.cumsum(rng.uniform(0.2, 1.5, size=(N, LENGTH)), axis=1).astype(np.float32)
    t = np.where(mask, t, t[np.arange(N), lengths - 1][:, None])
    channels = len(meta.channels)
    if meta.vocab_size:
        x = rng.integers(1, meta.vocab_size, size=(N, LENGTH, 1)).astype(np.float32)
    else:
        x = rng.normal(size=(N, LENGTH, channels)).astype(np.float32)
        if meta.static_channels:  # constant along each sequence
            x[:, :, channels - len(meta.static_channels):] = x[:, :1, channels - len(meta.static_channels):]
    x[~mask] = np.nan
    shape = (N, LENGTH) if meta.per_step else (N,)
    if meta.task == "regression":
        y = rng.normal(size=(*shape, meta.output_size)).astype(np.float32)
    else:
        classes = 2 if meta.task == "binary" else meta.output_size
        y = rng.integers(0, classes, size=shape).astype(np.int64)
    return Dataset(meta, {s: Split(x, t, mask, y) for s in ("train", "val", "test")})


def test_every_profile_is_listed_and_described() -> None:
    names = profiles.names()
    papers = {n.split("-")[0] for n in names}
    assert {"cfc", "fwp", "cdrnde", "tw"} <= papers  # one paper each at least
    assert all(profiles.describe(n) for n in names)


# The papers' reproductions (for a GPU cluster); `default-repeats` is the default run searched 3 times.
PAPER_PROFILES = [n for n in profiles.names() if n.split("-")[0] in {"cfc", "fwp", "cdrnde", "tw"}]


def test_every_profile_is_a_paper_s_or_the_default_repeated() -> None:
    assert sorted(profiles.names()) == sorted([*PAPER_PROFILES, "default-repeats", "ucr-datasets"])


def test_ucr_datasets_is_the_default_families_over_five_bundled_datasets_on_a_cpu() -> None:
    """Issue 32's many-dataset profile: the default's six families on JapaneseVowels and four UCR
    datasets aeon ships, each family's reference (one trial), 3 final seeds on one core each."""
    from pipeline.config import load_params

    _, params = profiles.load("ucr-datasets", PARAMS)
    base = load_params(PARAMS)
    assert params.families == base.families
    assert {"japanese_vowels", "arrow_head", "gun_point", "italy_power_demand", "osu_leaf"} <= set(params.datasets)
    assert all(params.prepare[d].kind == "uea" for d in params.datasets)  # offline: aeon's bundled copies
    assert params.search.num_samples == 1 and params.search.resources.gpu == params.final.resources.gpu == 0
    assert params.search.resources.cpu == params.final.resources.cpu == 1
    assert len(params.final.seeds) == params.promote.seeds_required == 3
    assert params.final.patience is not None and params.final.min_steps > 1  # trained until validation stops
    assert profiles.check_spaces("ucr-datasets", params, ROOT) == 5 * 6
    for family, values in params.search.fixed.items():  # each fixed value is a choice of the family's space,
        space = load_space(space_path(ROOT, family), family)
        for key, value in values.items():
            if key not in space.params:  # or a training setting it does not search (ode_rnn's grad_clip,
                assert key in TRAINING_KEYS, (family, key)  # its authors' trainer's), valid as one
                assert getattr(TrainSettings(lr=1e-3, batch_size=32, **{key: value}), key) == value, (family, key)
                continue
            spec = space.params[key]
            assert value in spec.choices if spec.choices else spec.low <= value <= spec.high, (family, key)
    assert params.search.fixed["ode_rnn"]["grad_clip"] == 1.0 and params.final.epochs == 120
    gun_point, osu_leaf = (params.final.for_cell(d, "ode_rnn_tw") for d in ("gun_point", "osu_leaf"))
    assert (gun_point.epochs, gun_point.patience, osu_leaf.epochs, osu_leaf.patience) == (200, 60, 120, 10)


def test_default_repeats_is_the_default_run_with_its_search_repeated_three_times() -> None:
    from pipeline.config import load_params

    _, params = profiles.load("default-repeats", PARAMS)
    base = load_params(PARAMS)
    assert params.search.repeats == 3 and base.search.repeats == 1
    assert params.search.model_dump(exclude={"repeats"}) == base.search.model_dump(exclude={"repeats"})
    assert base.final.race.enabled and not params.final.race.enabled  # repeats, not seeds, are then the unit
    assert params.final.model_dump(exclude={"race"}) == base.final.model_dump(exclude={"race"})
    assert (params.promote, params.datasets, params.families) == (base.promote, base.datasets, base.families)


@pytest.mark.parametrize("name", PAPER_PROFILES)
def test_profile_loads_validates_and_fits_every_space(name: str) -> None:
    raw, params = profiles.load(name, PARAMS)
    assert set(raw["datasets"]) == set(params.datasets) and params.search.num_samples == 1
    if name.endswith("-cpu"):  # the rows of a paper's table that fit a 2-core machine, 3 seeds at least
        assert params.search.resources.gpu == params.final.resources.gpu == 0
        assert params.search.resources.cpu == params.final.resources.cpu == 1
        assert len(params.final.seeds) == params.promote.seeds_required >= 3
    else:  # for a GPU cluster, the papers' 5 seeds
        assert params.search.resources.gpu > 0 and params.final.resources.gpu > 0
        assert len(params.final.seeds) == params.promote.seeds_required == 5
    assert params.search.min_steps == params.final.min_steps == 1  # the paper's epochs as printed, one pass each
    assert profiles.check_spaces(name, params, ROOT) == len(params.datasets) * len(params.families)
    for dataset in params.datasets:
        meta = fixture_dataset(dataset, params.prepare[dataset]).meta
        for family in params.families:
            space = load_space(space_path(ROOT, family), family).for_dataset(dataset)
            space, _ = fix_values(space, params.search.fixed.get(family, {}))  # a paper's protocol for a baseline
            epochs = params.final.for_family(family).epochs
            check_for_dataset(space, dataset, meta.task, bool(meta.vocab_size), epochs)  # raises if not


@pytest.mark.parametrize("name", PAPER_PROFILES)
def test_profile_first_trials_train_one_step_on_fixture_data(name: str) -> None:
    """The first trial of each (dataset, family) search is its reference: one step of it trains."""
    _, params = profiles.load(name, PARAMS)
    for dataset in params.datasets:
        data = fixture_dataset(dataset, params.prepare[dataset])
        for family in params.families:
            space = load_space(space_path(ROOT, family), family).for_dataset(dataset)
            space, _ = fix_values(space, params.search.fixed.get(family, {}))  # as the search plans it
            if data.meta.per_step:  # as the search plans it: nothing reads later steps (pipeline/sweep/plans.py)
                space, _ = causal_space(space, dataset)
            train_cfg, model_cfg = split_config({**space.reference, **space.fixed})
            settings = TrainSettings(**{**train_cfg, "batch_size": N})  # the whole fixture split: one step
            epochs = params.final.for_family(family).epochs
            trainer = Trainer(family, model_cfg, settings, data, seed=0, epochs=epochs)
            before = trainer.weights()
            loss = trainer.train_epoch()
            assert np.isfinite(loss), (dataset, family)
            after = trainer.weights()
            assert any(not torch.equal(before[k], after[k]) for k in before), (dataset, family)


def test_family_epochs_come_from_the_paper_tables() -> None:
    _, cfc = profiles.load("cfc-physionet2012", PARAMS)
    assert [cfc.final.for_family(f).epochs for f in ("cf_s", "cfc", "cfc_no_gate", "cfc_mmrnn")] == [116, 57, 58, 65]
    assert cfc.final.for_family("gru_d").epochs == cfc.final.epochs == 116  # Table S2 has no baselines
    _, cpu = profiles.load("cfc-physionet2012-cpu", PARAMS)
    assert [cpu.final.for_family(f).epochs for f in ("cfc", "cfc_no_gate", "cfc_mmrnn")] == [57, 58, 65]
    assert set(cpu.families) < set(cfc.families) and cpu.families[:3] == ["cfc", "cfc_no_gate", "cfc_mmrnn"]
    _, xor = profiles.load("cfc-xor", PARAMS)
    _, cdrnde = profiles.load("cdrnde", PARAMS)  # the baselines train with Table 2's protocol (review N4)
    baselines = [f for f in cdrnde.families if not f.startswith("cdr_nde")]
    # ... with Lechner & Hasani's Keras RMSprop (rho 0.9) and no clipping (ode_lstm's own space clips at 1)
    table2 = {"optimizer": "rmsprop", "rms_alpha": 0.9, "lr": 0.005, "batch_size": 256, "hidden_size": 64,
              "lr_schedule": "step", "lr_decay": 0.1, "lr_step_fraction": 0.5, "grad_clip": 0.0}
    assert sorted(cdrnde.search.fixed) == sorted(baselines) and all(
        v == table2 for f, v in cdrnde.search.fixed.items() if f != "ode_lstm")
    # Table 1: ODE-LSTM with explicit Euler, 1/4 of an interval a step; Lechner & Hasani's cell
    assert cdrnde.search.fixed["ode_lstm"] == {**table2, **KERAS_ODE_LSTM}
    _, tw = profiles.load("tw-physionet2012", PARAMS)  # both latent models read the same state (N2)
    assert tw.search.fixed["latent_ode"] == {"sequence_readout": "decoded"}
    _, tw_cpu = profiles.load("tw-physionet2012-cpu", PARAMS)  # Table 1(a) on set-a, on one core per seed
    assert [tw_cpu.final.for_family(f).epochs for f in ("latent_ode", "latent_ode_tw")] == [80, 31]
    # gru_d's row is cfc-physionet2012-cpu's: the same data, scaling and configuration
    assert tw_cpu.families == ["latent_ode", "latent_ode_tw"]
    _, cfc_cpu = profiles.load("cfc-physionet2012-cpu", PARAMS)
    assert "gru_d" in cfc_cpu.families and cfc_cpu.prepare["physionet2012"] == tw_cpu.prepare["physionet2012"]
    assert tw_cpu.search.fixed == tw.search.fixed and set(tw_cpu.families) <= set(tw.families)
    assert (tw.prepare["physionet2012"].sets, tw_cpu.prepare["physionet2012"].sets) == (["a", "b", "c"], ["a"])
    assert xor.prepare["xor_event"].n_train == 100_000 and xor.final.epochs == 200


KERAS_ODE_LSTM = {"code": "keras", "forget_bias": 3.0, "method": "euler", "solver_steps": 4}


def test_walker2d_rows_train_as_the_authors_scripts_did() -> None:
    """CfC Table 7: the CfC variants by Table S4 (50 epochs), LTC by raminmh/CfC's BEST_LTC, the
    rows it quotes from Lechner & Hasani 2020 by mlech26l/ode-lstms walker_kinematic.py (200
    epochs); the CPU subsets keep those configurations at their stated epochs."""
    lechner = {"optimizer": "rmsprop", "rms_alpha": 0.9, "lr": 0.005, "batch_size": 128, "hidden_size": 64,
               "lr_schedule": "none", "grad_clip": 0.0}
    _, gpu = profiles.load("cfc-walker2d", PARAMS)
    quoted = ["ct_rnn", "ode_lstm", "gru_d", "lstm_dt", "gru_ode"]  # the ODE-RNN row: ct_rnn at leak 0, below
    assert sorted(gpu.search.fixed) == sorted(quoted)
    assert all(v == lechner for f, v in gpu.search.fixed.items() if f != "ode_lstm")
    assert gpu.search.fixed["ode_lstm"] == {**lechner, **KERAS_ODE_LSTM}  # their node_cell.py ODELSTM
    assert [gpu.final.for_family(f).epochs for f in gpu.families] == [50] * 5 + [200] * 5  # ltc: 50, as BEST_LTC
    ltc = load_space(space_path(ROOT, "ltc"), "ltc").for_dataset("walker2d")
    assert ltc.reference == {"lr": 0.05, "batch_size": 128, "hidden_size": 128, "ode_unfolds": 3}
    assert {k: ltc.fixed[k] for k in ("optimizer", "lr_schedule", "lr_decay", "grad_clip")} == {
        "optimizer": "adam", "lr_schedule": "exponential", "lr_decay": 0.95, "grad_clip": 10.0}
    assert load_space(space_path(ROOT, "ltc"), "ltc").for_dataset("basic_motions").reference["hidden_size"] == 32
    _, cpu = profiles.load("cfc-walker2d-cpu", PARAMS)
    assert set(cpu.families) < set(gpu.families)
    assert cpu.search.fixed == {"ct_rnn": {**lechner, "leak": 0.0}, "ode_lstm": {**lechner, **KERAS_ODE_LSTM}}
    assert [cpu.final.for_family(f).epochs for f in cpu.families] == [50, 50, 50, 50, 200]  # ODE-LSTM: 200
    _, cdr = profiles.load("cdrnde-walker2d-cpu", PARAMS)
    _, table2 = profiles.load("cdrnde", PARAMS)
    assert cdr.datasets == ["walker2d"] and set(cdr.families) < set(table2.families)
    assert cdr.search.fixed["cdr_nde_heat"] == {"method": "euler"}  # Table 3's Euler row
    assert cdr.search.fixed["ode_lstm"] == table2.search.fixed["ode_lstm"]
    assert cdr.search.fixed["lstm_dt"] == table2.search.fixed["lstm_dt"]
    assert cdr.final.epochs == 100 and table2.final.epochs == 200  # half, the x0.1 step still halfway
    # but the cheap Augmented LSTM's, whose validation error still fell at epoch 100
    assert {f: cdr.final.for_family(f).epochs for f in cdr.families} == {
        "cdr_nde": 100, "cdr_nde_heat": 100, "ode_lstm": 100, "lstm_dt": 200}
    # the inputs as the authors' loaders feed them (Walker2dImitationData: no scaling)
    assert {p.prepare["walker2d"].scaling for p in (gpu, cpu, cdr, table2)} == {"raw"}


def test_overlay_merges_mappings_and_replaces_the_rest() -> None:
    base = {"search": {"epochs": 4, "asha": {"grace_period": 2, "reduction_factor": 2}}, "datasets": ["a", "b"]}
    out = profiles.merge(base, {"search": {"asha": {"grace_period": 1}}, "datasets": ["c"]})
    assert out == {"search": {"epochs": 4, "asha": {"grace_period": 1, "reduction_factor": 2}}, "datasets": ["c"]}
    assert base["search"]["asha"]["grace_period"] == 2  # the base is not changed


def test_family_epochs_refuse_unknown_families_and_bad_values(tmp_path: Path) -> None:
    for bad, match in (({"transformer": 3}, "unknown families"), ({"cfc": 0}, "family_epochs.cfc")):
        raw = profiles.merge(read_yaml(PARAMS), {"final": {"family_epochs": bad}})
        with pytest.raises(ConfigError, match=match):
            params_from(raw, tmp_path / "params.yaml")


def test_unknown_profile_lists_the_valid_ones() -> None:
    with pytest.raises(ConfigError, match=r"unknown profile 'nope'; valid: \[.*'cfc-xor'"):
        profiles.load("nope", PARAMS)


def _ctsweep(root: Path, *args: str) -> subprocess.CompletedProcess:
    exe = Path(sys.executable).parent / "ctsweep"
    return subprocess.run([str(exe), *args, "--root", str(root)], capture_output=True, text=True, timeout=300)


def test_cli_prints_writes_and_keeps_the_hand_written_params(tmp_path: Path) -> None:
    (tmp_path / "params.yaml").write_text(PARAMS.read_text())
    (tmp_path / "search_spaces").symlink_to(ROOT / "search_spaces")
    listed = _ctsweep(tmp_path, "profile")
    assert listed.returncode == 0 and all(n in listed.stdout for n in profiles.names())
    shown = _ctsweep(tmp_path, "profile", "tw-sepsis")
    assert shown.returncode == 0 and shown.stdout.startswith(profiles.HEADER)
    assert (tmp_path / "params.yaml").read_text() == PARAMS.read_text()  # printing writes nothing
    for name in ("tw-sepsis", "cdrnde"):  # a second profile replaces the first, the backup stays the user's
        written = _ctsweep(tmp_path, "profile", name, "--write")
        assert written.returncode == 0, written.stderr
    assert (tmp_path / "params.yaml.bak").read_text() == PARAMS.read_text()
    params = load_params(tmp_path / "params.yaml")
    assert params.datasets == ["person_activity", "walker2d"] and "cdr_nde" in params.families
    bad = _ctsweep(tmp_path, "profile", "nope", "--write")
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "unknown profile 'nope'" in bad.stderr
    assert load_params(tmp_path / "params.yaml").datasets == ["person_activity", "walker2d"]  # untouched


def test_every_family_of_a_profile_is_registered() -> None:
    for name in profiles.names():
        _, params = profiles.load(name, PARAMS)
        assert set(params.families) <= set(MODELS), name
