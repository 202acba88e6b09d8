"""params.yaml validation: wrong keys and types fail naming the file, key and what is allowed."""

from __future__ import annotations

import pytest

from pipeline.config import dataset_params, load_params
from pipeline.errors import ConfigError
from tests.conftest import REPO, default_params, write_params


def test_default_params_load() -> None:
    params = load_params(REPO / "params.yaml")
    assert params.datasets == ["xor_event", "japanese_vowels", "japanese_vowels_drop30"]
    # one family from each source paper (CfC, fast weights, CDR-NDE, temporal weights), two baselines
    assert set(params.families) == {"cfc", "cde_fwp_delta", "cdr_nde", "ode_rnn_tw", "ncde", "ode_rnn"}
    assert params.final.seeds == [0, 1, 2, 3, 4]
    assert params.search.trial_seed not in params.final.seeds


def test_unknown_key_names_file_and_key(tmp_path) -> None:
    raw = default_params()
    raw["search"]["num_sample"] = 3
    path = write_params(tmp_path, raw)
    with pytest.raises(ConfigError) as err:
        load_params(path)
    assert str(path) in str(err.value) and "search.num_sample" in str(err.value)
    assert "allowed here" in str(err.value) and "num_samples" in str(err.value)


def test_wrong_type_names_key_and_value(tmp_path) -> None:
    raw = default_params()
    raw["final"]["epochs"] = "many"
    with pytest.raises(ConfigError, match=r"final\.epochs.*'many'"):
        load_params(write_params(tmp_path, raw))


def test_out_of_range_value(tmp_path) -> None:
    raw = default_params()
    raw["prepare"]["japanese_vowels"]["drop_fraction"] = 1.5
    with pytest.raises(ConfigError, match=r"prepare\.japanese_vowels.*drop_fraction"):
        load_params(write_params(tmp_path, raw))


def test_unknown_family_lists_valid_ones(tmp_path) -> None:
    raw = default_params()
    raw["families"] = ["cfc", "transformer"]
    with pytest.raises(ConfigError, match=r"transformer.*valid.*cde_fwp_delta.*ode_rnn"):
        load_params(write_params(tmp_path, raw))


def test_dataset_without_prepare_section(tmp_path) -> None:
    raw = default_params()
    raw["datasets"].append("mnist")
    with pytest.raises(ConfigError, match="mnist"):
        load_params(write_params(tmp_path, raw))


def test_unknown_dataset_lists_valid_names() -> None:
    params = load_params(REPO / "params.yaml")
    with pytest.raises(ConfigError, match=r"'mnist'.*japanese_vowels"):
        dataset_params(params, "mnist")


def test_duplicate_final_seeds(tmp_path) -> None:
    raw = default_params()
    raw["final"]["seeds"] = [0, 0, 1]
    with pytest.raises(ConfigError, match="distinct"):
        load_params(write_params(tmp_path, raw))


def test_malformed_yaml_names_file(tmp_path) -> None:
    path = tmp_path / "params.yaml"
    path.write_text("search: [unclosed\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_params(path)


def test_every_dataset_kind_in_params_loads() -> None:
    kinds = {p.kind for p in load_params(REPO / "params.yaml").prepare.values()}
    assert kinds == {"xor", "uea", "speech_commands", "sepsis", "physionet2012", "person_activity", "walker2d", "imdb"}


def test_precompute_names_the_family_and_the_arguments(tmp_path) -> None:
    params = default_params()
    params["prepare"]["eigenworms"]["precompute"] = [{"family": "nrde", "args": {"hidden_size": 3}}]
    with pytest.raises(ConfigError, match=r"prepare\.eigenworms\.precompute\.0.*hidden_size.*logsig_depth"):
        load_params(write_params(tmp_path, params))
    params["prepare"]["eigenworms"]["precompute"] = [{"family": "nrdee", "args": {}}]
    with pytest.raises(ConfigError, match="unknown family 'nrdee'"):
        load_params(write_params(tmp_path, params))


def test_unknown_dataset_kind_lists_the_kinds(tmp_path) -> None:
    params = default_params()
    params["prepare"]["xor_event"]["kind"] = "speechcommands"
    with pytest.raises(ConfigError, match="speech_commands"):
        load_params(write_params(tmp_path, params))


@pytest.mark.parametrize("factors", [[1.0], [0.8, 0.8], [-0.5]])
def test_bad_lr_factors_are_refused(tmp_path, factors) -> None:
    raw = default_params()
    raw["final"]["lr_factors"] = factors
    with pytest.raises(ConfigError, match=r"key `final`.*lr_factors must be distinct positive factors other than 1"):
        load_params(write_params(tmp_path, raw))


def test_promotion_p_value_must_be_a_probability(tmp_path) -> None:
    raw = default_params()
    raw["promote"]["max_p_value"] = 1.5
    with pytest.raises(ConfigError, match=r"promote\.max_p_value.*1.5"):
        load_params(write_params(tmp_path, raw))
    raw["promote"]["max_p_value"] = None
    assert load_params(write_params(tmp_path, raw)).promote.max_p_value is None
