"""params.yaml validation: wrong keys and types fail naming the file, key and what is allowed."""

from __future__ import annotations

import pytest
import yaml

from pipeline.config import dataset_params, load_params
from pipeline.errors import ConfigError
from tests.conftest import REPO, default_params, write_params


def test_default_params_load() -> None:
    params = load_params(REPO / "params.yaml")
    assert params.datasets == ["japanese_vowels"]  # ships with aeon: the default downloads nothing
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


# Strict parsing (issue 14): each case below used to pass silently, hang or end in a traceback.

def _refused(path, *fragments: str) -> str:
    """The ConfigError for `path`: one line, naming the file and every fragment."""
    with pytest.raises(ConfigError) as err:
        load_params(path)
    message = str(err.value)
    assert "\n" not in message and str(path) in message and len(message) < 2000, message
    for fragment in fragments:
        assert fragment in message, (fragment, message)
    return message


@pytest.mark.parametrize(("section", "key", "value", "fragment"), [
    ("search", "epochs", True, "valid integer"),            # true used to become 1 epoch
    ("search", "num_samples", 10**24, "less than or equal to 100000"),
    ("search", "num_samples", 0, "greater than or equal to 1"),
    ("search", "max_concurrent", 10**6, "less than or equal to 1024"),
    ("final", "epochs", 1.0, "valid integer"),
    ("final", "seeds", [True, 1], "valid integer"),
    ("final", "seeds", list(range(101)), "at most 100"),
    ("final", "lr_factors", [float("inf")], "finite number"),
    ("final", "lr_factors", [float("nan")], "finite number"),
    ("promote", "min_improvement", float("nan"), "finite number"),
    ("search", "sampler_seed", -1, "greater than or equal to 0"),
    ("search", "autoscaling", "false", "valid boolean"),      # a string is not a bool
    ("search", "optuna_storage", "", "at least 1 character"),
    ("search", "round_size", 0, "greater than or equal to 1"),
    ("search", "round_size", -2, "greater than or equal to 1"),
    ("search", "round_size", 7, "more than search.num_samples (6)"),  # a round larger than the search
    ("search", "rounds_in_flight", 0, "greater than or equal to 1"),
    ("search", "rounds_in_flight", 9, "less than or equal to 8"),
    ("search", "rounds_in_flight", "two", "valid integer"),
    ("search", "repeats", 0, "greater than or equal to 1"),
    ("search", "repeats", -1, "greater than or equal to 1"),
    ("search", "repeats", 21, "less than or equal to 20"),
])
def test_wrong_types_non_finite_numbers_and_huge_counts_are_refused(tmp_path, section, key, value, fragment) -> None:
    raw = default_params()
    raw[section][key] = value
    _refused(write_params(tmp_path, raw), f"{section}.{key}", fragment)


@pytest.mark.parametrize(("value", "says"), [
    (float("nan"), "cfc.lr is nan; allowed: a finite number"),
    (float("-inf"), "cfc.lr is -inf; allowed: a finite number"),
    ([0.001, 0.01], "cfc.lr is a list; allowed: one value, a number, a string or true/false"),
    ({"low": 0.001}, "cfc.lr is a mapping; allowed: one value"),
    (None, "cfc.lr is empty (null); allowed: one value"),
])
def test_a_fixed_value_that_is_no_scalar_is_one_sentence_not_pydantics_union(tmp_path, value, says) -> None:
    raw = default_params()
    raw["search"]["fixed"] = {"cfc": {"lr": value}}
    message = _refused(write_params(tmp_path, raw), "key `search.fixed`: " + says)
    assert "valid string" not in message and "valid boolean" not in message


def test_round_size_left_out_is_two_or_the_whole_search(tmp_path) -> None:
    raw = default_params()
    del raw["search"]["round_size"]
    assert load_params(write_params(tmp_path, raw)).search.round_size == 2
    raw["search"]["num_samples"] = 1
    assert load_params(write_params(tmp_path, raw)).search.round_size == 1
    message = _refused(write_params(tmp_path, {**raw, "search": {**raw["search"], "round_size": 2}}),
                       "search.round_size is 2", "allowed: 1 to 1")
    assert "ray" not in message.lower()


@pytest.mark.parametrize("value", ["yes", True, "1"])
def test_cpu_yes_is_not_one_cpu(tmp_path, value) -> None:
    raw = default_params()
    raw["search"]["resources"]["cpu"] = value
    _refused(write_params(tmp_path, raw), "search.resources.cpu", "valid number")


def test_yaml_yes_is_not_a_number(tmp_path) -> None:
    """YAML 1.1 reads an unquoted `yes` as true: still no CPU count."""
    path = tmp_path / "params.yaml"
    path.write_text((REPO / "params.yaml").read_text().replace("    cpu: 1\n", "    cpu: yes\n", 1))
    _refused(path, "search.resources.cpu", "valid number", "True")


@pytest.mark.parametrize("section", ["search", "final"])
def test_family_gpu_fraction_above_one_is_one_line(tmp_path, section) -> None:
    raw = default_params()
    raw[section]["family_resources"] = {"cfc": {"gpu": 1.5}}
    _refused(write_params(tmp_path, raw), f"{section}.family_resources.cfc.gpu", "at most 1 or a whole number")


def test_family_resources_are_strict_too(tmp_path) -> None:
    raw = default_params()
    raw["search"]["family_resources"] = {"cfc": {"cpu": True}}
    _refused(write_params(tmp_path, raw), "search.family_resources.cfc.cpu", "valid number")


def test_seeds_required_above_the_final_seeds(tmp_path) -> None:
    raw = default_params()
    raw["final"]["seeds"] = [0, 1, 2]
    raw["promote"]["seeds_required"] = 4
    _refused(write_params(tmp_path, raw), "seeds_required is 4", "only 3")
    raw["promote"]["seeds_required"] = 3
    assert load_params(write_params(tmp_path, raw)).promote.seeds_required == 3


def test_an_integer_is_still_a_float(tmp_path) -> None:
    raw = default_params()
    raw["final"]["lr_factors"] = [2]
    raw["search"]["resources"]["cpu"] = 2
    params = load_params(write_params(tmp_path, raw))
    assert params.final.lr_factors == [2.0] and params.search.resources.cpu == 2.0


@pytest.mark.parametrize("name", [".", "..", "", "a/b", "/", "../x", "-x", "x" * 65, "a b"])
def test_bad_names_are_refused_wherever_they_come_in(tmp_path, name) -> None:
    raw = default_params()
    raw["datasets"] = [name]
    _refused(write_params(tmp_path, raw), "datasets.0", "not a valid name", "a letter followed by")
    raw = default_params()
    raw["families"] = ["cfc", name]
    _refused(write_params(tmp_path, raw), "families.1", "not a valid name")
    raw = default_params()
    raw["prepare"][name] = raw["prepare"]["xor_event"]
    _refused(write_params(tmp_path, raw), "key `prepare`", "not a valid name")
    raw = default_params()
    raw["final"]["family_resources"] = {name: {"cpu": 1}}
    _refused(write_params(tmp_path, raw), "final.family_resources", "not a valid name")
    raw = default_params()
    raw["prepare"]["eigenworms"]["precompute"] = [{"family": name, "args": {}}]
    _refused(write_params(tmp_path, raw), "prepare.eigenworms.precompute.0.family", "not a valid name")


def test_names_listed_twice(tmp_path) -> None:
    raw = default_params()
    raw["datasets"] = ["xor_event", "xor_event"]
    _refused(write_params(tmp_path, raw), "datasets must be distinct", "xor_event")


def test_precompute_arguments_are_checked_by_their_family(tmp_path) -> None:
    raw = default_params()
    raw["prepare"]["eigenworms"]["precompute"] = [{"family": "nrde", "args": {"logsig_depth": True}}]
    _refused(write_params(tmp_path, raw), "args.logsig_depth", "True is not allowed")
    raw["prepare"]["eigenworms"]["precompute"] = [{"family": "nrde", "args": {"logsig_depth": 7}}]
    _refused(write_params(tmp_path, raw), "logsig_depth must be one of [1, 2]")


def test_duplicate_section_is_refused_not_dropped(tmp_path) -> None:
    path = tmp_path / "params.yaml"
    path.write_text((REPO / "params.yaml").read_text() + "search:\n  epochs: 2\n")
    message = _refused(path, "key 'search' given twice")
    assert message.startswith(f"{path}:") and ":1: not valid YAML" in message


@pytest.mark.parametrize(("data", "fragment"), [
    (bytes(range(256)), "NUL bytes"),
    ("datasets: [a]\n".encode("utf-16"), "UTF-16"),
    ("datasets: [café]\n".encode("latin-1"), "not UTF-8"),
    (b"a: 1\n" * 300_000, "larger than the 1048576 allowed"),
    (b'a: "\x07"\n', "character #x0007"),
])
def test_binary_and_non_utf8_files_are_one_line(tmp_path, data, fragment) -> None:
    path = tmp_path / "params.yaml"
    path.write_bytes(data)
    _refused(path, fragment)


def test_alias_bomb_is_refused_at_once(tmp_path) -> None:
    """A few hundred bytes expanding to 9^9 values: it used to hang for minutes echoing itself."""
    import time

    lines = ["a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, 9)]
    path = tmp_path / "params.yaml"
    path.write_text("\n".join(lines) + "\nsearch: {num_samples: *a8}\n")
    start = time.monotonic()
    _refused(path, "expands to more than 200000 values")
    assert time.monotonic() - start < 5


@pytest.mark.parametrize(("text", "fragment"), [
    ("a: &a [*a]\n", "recursive alias"),
    ("a: &x 1\nb: [" + ", ".join(["*x"] * 101) + "]\n", "more than 100 aliases"),
    ("a: " + "[" * 5000 + "]" * 5000 + "\n", "nested deeper than 64"),
    ("a: !!python/object/apply:os.system [ls]\n", "could not determine a constructor"),
    ("a: 1\n---\nb: 2\n", "expected a single document"),
])
def test_unsafe_yaml_is_refused_in_one_line(tmp_path, text, fragment) -> None:
    path = tmp_path / "params.yaml"
    path.write_text(text)
    _refused(path, "not valid YAML", fragment)


def test_syntax_error_is_one_line_with_line_and_column(tmp_path) -> None:
    path = tmp_path / "params.yaml"
    path.write_text("datasets: [a]\nsearch: {epochs: 2\n")
    message = _refused(path, "not valid YAML")
    assert message.startswith(f"{path}:3:1: not valid YAML: ")


def test_a_huge_bad_value_is_echoed_as_a_short_prefix(tmp_path) -> None:
    raw = default_params()
    raw["search"]["epochs"] = "x" * 100_000
    raw["prepare"]["xor_event"]["kind"] = "y" * 100_000
    raw["final"]["x" * 100_000] = 1
    message = _refused(write_params(tmp_path, raw))
    assert len(message) < 1500 and "x" * 50 not in message and "y" * 50 not in message


def test_several_problems_share_one_line(tmp_path) -> None:
    raw = default_params()
    raw["search"].update(epochs=0, num_samples=0, max_concurrent=0, n_startup_trials=-1)
    message = _refused(write_params(tmp_path, raw), "search.num_samples", "; key `search.max_concurrent`")
    assert "(and 1 more)" in message


def test_pure_python_yaml_gives_the_same_refusals(tmp_path, monkeypatch) -> None:
    """Without libyaml the loader falls back on PyYAML's own parser, with the same checks."""
    import importlib.util
    import sys

    monkeypatch.setitem(sys.modules, "yaml._yaml", None)
    spec = importlib.util.spec_from_file_location("yaml_load_pure", REPO / "pipeline" / "config" / "yaml_load.py")
    pure = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(pure)
    assert not hasattr(pure, "CParser") and pure._Parser.__module__ == "yaml_load_pure"
    path = tmp_path / "p.yaml"
    for text, fragment in [("a: 1\na: 2\n", "given twice"), ("a: " + "[" * 5000 + "]" * 5000, "nested deeper"),
                           ("a: &a [*a]\n", "recursive alias"), ("a: [1\n", "not valid YAML")]:
        path.write_text(text)
        with pytest.raises(ConfigError, match=fragment):
            pure.load_yaml(path)
    path.write_text((REPO / "params.yaml").read_text())
    assert pure.load_yaml(path) == yaml.safe_load((REPO / "params.yaml").read_text())


def test_a_machine_written_file_may_be_allowed_more_bytes(tmp_path) -> None:
    from pipeline.config import read_yaml

    path = tmp_path / "dvc.lock"
    path.write_text("stages:\n" + "".join(f"  s{i}: {{cmd: run {i}}}\n" for i in range(60_000)))
    with pytest.raises(ConfigError, match="larger than the 1048576 allowed"):
        read_yaml(path)
    assert len(read_yaml(path, max_bytes=16 << 20)["stages"]) == 60_000
