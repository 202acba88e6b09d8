"""search.saturation: a family's search goes on while its expected best still rises, within one
budget of trials; the pool's grants do not depend on the order in which rounds end."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from ray.tune.search import Searcher

from pipeline.config.params import load_params
from pipeline.errors import ConfigError
from pipeline.sweep.families import FAMILY_KEY, TRIAL_NUMBER_KEY, FamilySearcher
from pipeline.sweep.saturation import BUDGET, CAP, FLATTENED, Pool, rising
from pipeline.sweep.scheduling import make_searcher


def test_rising_reads_the_expected_best_curve() -> None:
    assert not rising([0.9, 0.9, 0.9, 0.9], "max", 0.01)  # every trial the same: nothing to gain
    assert rising([0.1, 0.2, 0.3, 0.9], "max", 0.01)  # the best is one lucky trial: more would help
    assert not rising([0.1, 0.2, 0.3, 0.9], "max", 0.5)  # ... unless the share asked for is large
    assert rising([0.9, 0.8, 0.7, 0.1], "min", 0.01) and not rising([0.5], "max", 0.01)


def ordered(answers: dict[str, list[bool]], base: int, cap: int, total: int, size: int,
            costs: dict[str, int] | None = None) -> tuple[dict, dict]:
    """The grants taken one by one in priority order (round asked for, then the units' order):
    what the Pool must decide whatever order the requests come in."""
    units = list(answers)
    price = {u: (costs or {}).get(u, 1) for u in units}
    left, granted, reason = total - base * sum(price.values()), dict.fromkeys(units, 0), {}
    for r in range(1, (cap - base) // size + 2):
        for u in units:
            if u in reason:
                continue
            if not answers[u][r - 1]:
                reason[u] = FLATTENED
            elif r > (cap - base) // size:
                reason[u] = CAP
            elif left < size * price[u]:
                reason[u] = BUDGET
            else:
                granted[u] += 1
                left -= size * price[u]
    return granted, reason


def raced(answers: dict[str, list[bool]], base: int, cap: int, total: int, size: int, rng: random.Random,
          costs: dict[str, int] | None = None) -> tuple[dict, dict]:
    """The Pool driven with rounds ending in a random order: any active unit may be the next to
    tell its whole budget and ask."""
    pool = Pool(list(answers), base, cap, total, size, costs)
    asked = dict.fromkeys(answers, 0)
    while True:
        ready = [u for u in answers if pool.state[u] == "active"]
        if not ready:
            assert all(pool.done(u) for u in answers), "a request still waits with nobody left to decide it"
            return dict(pool.granted), dict(pool.reason)
        unit = rng.choice(ready)
        pool.ask(unit, answers[unit][asked[unit]])
        asked[unit] += 1


@pytest.mark.parametrize("total", [16, 20, 24, 30, 40])
def test_the_pool_grants_as_the_fixed_order_would_whatever_order_rounds_end(total: int) -> None:
    answers = {"a": [True] * 4, "b": [False] * 4, "c": [True, False, True, True], "d": [True] * 4}
    expected = ordered(answers, 4, 10, total, 2)
    rng = random.Random(total)
    for _ in range(200):
        assert raced(answers, 4, 10, total, 2, rng) == expected
    granted, reason = expected
    assert sum(granted.values()) * 2 <= total - 16  # never past the budget
    assert all(4 + 2 * g <= 10 for g in granted.values())  # never past the cap


def test_flattened_families_give_their_share_to_rising_ones() -> None:
    granted, reason = ordered({"a": [True] * 4, "b": [False] * 4, "c": [False] * 4}, 4, 16, 18, 2)
    assert reason["b"] == reason["c"] == FLATTENED and granted["a"] == 3 and reason["a"] == BUDGET
    assert raced({"a": [True] * 6, "b": [False] * 6, "c": [False] * 6}, 4, 16, 18, 2, random.Random(0)) == (granted, reason)


@pytest.mark.parametrize("share", [4, 6, 8, 12])
def test_priced_trials_are_granted_as_the_fixed_order_would_and_never_past_the_budget(share: int) -> None:
    answers = {"a": [True] * 6, "b": [False] * 6, "c": [True, False, True, True, True, True], "d": [True] * 6,
               "e": [True, True, False, True, True, True]}
    costs = {"a": 3183, "b": 909, "c": 375, "d": 1305, "e": 42}  # prices as the table's, all different
    total = share * sum(costs.values())
    expected = ordered(answers, 4, 14, total, 2, costs)
    rng = random.Random(share)
    for _ in range(200):
        assert raced(answers, 4, 14, total, 2, rng, costs) == expected
    granted, _ = expected
    assert sum(2 * g * costs[u] for u, g in granted.items()) <= total - 4 * sum(costs.values())


def test_a_cheap_familys_unused_share_does_not_buy_a_dear_familys_round() -> None:
    """The wall time the priced budget guards: two flattened cheap families free four trials, worth
    less than one round of the dear family, which stops on the budget; a cheap one still rising
    gets them."""
    answers = {"dear": [True] * 4, "cheap": [True] * 4, "flat1": [False] * 4, "flat2": [False] * 4}
    costs = {"dear": 10, "cheap": 1, "flat1": 1, "flat2": 1}
    total = 6 * sum(costs.values())  # num_samples 6: the fixed search's 6 trials of each, priced
    granted, reason = ordered(answers, 4, 10, total, 2, costs)
    assert granted["dear"] == 1 and reason["dear"] == BUDGET  # its own share's round, then nothing more
    assert granted["cheap"] == 3 and reason["cheap"] == CAP  # its own round and the flat ones' four trials
    assert raced(answers, 4, 10, total, 2, random.Random(1), costs) == (granted, reason)
    unpriced = ordered(answers, 4, 10, 6 * 4, 2)  # at par, as before: the dear family took their share
    assert unpriced[0]["dear"] > granted["dear"]


def test_a_pool_saved_before_prices_resumes_at_one_per_trial() -> None:
    import pickle

    pool = Pool(["a", "b"], 2, 6, 8, 2, {"a": 5, "b": 1})
    state = pool.__dict__.copy()
    del state["cost"]  # as pickled by a search started before trials were priced
    old = Pool.__new__(Pool)
    old.__setstate__(state)
    assert old.cost == {"a": 1, "b": 1} and pickle.loads(pickle.dumps(pool)).cost == {"a": 5, "b": 1}


def test_the_price_table_is_the_zoo_benchmarks_and_prices_every_built_in_family() -> None:
    import json

    from pipeline.models.builtin import BUILTIN_FAMILIES
    from pipeline.sweep.costs import MEDIAN, TABLE, costs_from_zoo, trial_cost

    zoo = json.loads((Path(__file__).resolve().parents[1] / "benchmarks" / "results" / "zoo.json").read_text())
    assert json.loads(TABLE.read_text()) == costs_from_zoo(zoo)  # `make bench` writes both
    assert all(trial_cost(f) > 0 for f in BUILTIN_FAMILIES) and set(BUILTIN_FAMILIES) <= set(costs_from_zoo(zoo)["costs"])
    assert trial_cost("my_own_family") == MEDIAN
    assert trial_cost("cde_fwp_delta") > 5 * trial_cost("cfc")  # the zoo's dearest default family, and its cheapest


def _space(trial) -> None:
    trial.suggest_float("lr", 1e-4, 1e-1, log=True)


def _saturating(families: list[str], total: int) -> FamilySearcher:
    searchers = {f: make_searcher(_space, None, "val_metric", "max", seed=i, n_startup_trials=1, max_epochs=3)
                 for i, f in enumerate(families)}
    pool = Pool([(f, 0) for f in families], 4, 10, total, 2)
    return FamilySearcher(searchers, dict.fromkeys(families, total // len(families)), 2, "val_metric", "max",
                          round_size=2, pools={(f, 0): pool for f in families}, rise=0.01)


def _serve(scores: dict[str, float | None], total: int, order: str, slots: int,
           searcher: FamilySearcher | None = None) -> tuple[dict, list]:
    """A saturating FamilySearcher driven to its end: each family's trials score as `scores` says
    (a constant: flat; None: each trial better than the last, still rising); trials end oldest
    first or newest first. Returns ({family: trials}, every proposal as (family, number, lr))."""
    families = list(scores)
    s = searcher or _saturating(families, total)
    proposals, live, n = [], [], 0
    while True:
        got = s.suggest(f"t{n}") if len(live) < slots else None
        if isinstance(got, dict):
            proposals.append((got[FAMILY_KEY], got[TRIAL_NUMBER_KEY], got["lr"]))
            live.append((f"t{n}", got))
            n += 1
            continue
        if got == Searcher.FINISHED and not live:
            break
        assert live, "the searcher waits with no trial running"
        trial_id, config = live.pop(0 if order == "oldest" else -1)
        value = scores[config[FAMILY_KEY]]
        value = 0.1 + 0.08 * config[TRIAL_NUMBER_KEY] if value is None else value
        s.on_trial_complete(trial_id, {"val_metric": value, "epoch": 3, "training_iteration": 3})
    trials = {f: sum(1 for g, _, _ in proposals if g == f) for f in families}
    assert all(s.finished(f) for f in families)
    return trials, sorted(proposals)


def test_priced_trials_can_outnumber_the_shares_and_tune_is_told_the_caps() -> None:
    """A dear family flattens at once: its unused share buys the cheap family more trials than the
    shares at par add up to (2 x 6), so Tune's num_samples must be the caps, not the shares."""
    searchers = {f: make_searcher(_space, None, "val_metric", "max", seed=i, n_startup_trials=1, max_epochs=3)
                 for i, f in enumerate(["dear", "cheap"])}
    costs = {("dear", 0): 5, ("cheap", 0): 1}
    pool = Pool(list(costs), 4, 16, 6 * 6, 2, costs)
    s = FamilySearcher(searchers, {"dear": 6, "cheap": 6}, 2, "val_metric", "max", round_size=2,
                       pools={u: pool for u in costs}, rise=0.01)
    assert s.total_samples == 32  # each unit's cap of 16
    trials, _ = _serve({"dear": 0.8, "cheap": None}, 12, "oldest", 2, searcher=s)
    assert trials == {"dear": 4, "cheap": 16}  # 20 trials: 2 rounds of the dear one's price bought 6 rounds


def test_a_saturating_search_stops_flat_families_and_feeds_rising_ones_within_the_budget() -> None:
    scores = {"flat": 0.8, "rising": None, "also_rising": None}
    trials, proposals = _serve(scores, 18, "oldest", 2)
    assert trials["flat"] == 4  # its curve never rose: stopped after the first rounds
    assert sum(trials.values()) <= 18 and all(t <= 10 for t in trials.values())
    assert trials["rising"] + trials["also_rising"] == 14  # the flat family's share went to them
    for order, slots in (("newest", 2), ("oldest", 1), ("newest", 3)):
        assert _serve(scores, 18, order, slots) == (trials, proposals)  # the same, however rounds end


def test_the_planned_totals_follow_the_grants_and_the_stops() -> None:
    """What the live display counts per family: its share while it runs, more once granted more,
    and exactly its trials once stopped; the hook hears only changes, and is never pickled."""
    import pickle

    scores = {"flat": 0.8, "rising": None, "also_rising": None}
    s = _saturating(list(scores), 18)
    heard: list[tuple[str, int]] = []
    s.watch_planned(lambda unit, n: heard.append((unit[0], n)))
    assert heard == [("flat", 6), ("rising", 6), ("also_rising", 6)]  # the shares, at the start
    restored = pickle.loads(pickle.dumps(s))  # as Tune checkpoints the searcher: the hook stays behind
    assert restored._planned_hook is None and restored.planned(("flat", 0)) == 6
    trials, _ = _serve(scores, 18, "oldest", 2, searcher=s)
    last = {family: n for family, n in heard}
    assert last == trials  # each family's last total is the trials it ran
    assert ("flat", 4) in heard and max(n for f, n in heard if f == "rising") > 6
    assert len(heard) == len(set(heard))  # a total is said once, when it changes


@pytest.mark.parametrize(("saturation", "words"), [
    ("{enabled: true, min_trials: 3}", "saturation.min_trials is 3, not a whole number of rounds of 2"),
    ("{enabled: true, min_trials: 8}", "the budget cannot hold the first rounds of every family"),
    ("{enabled: true, max_trials: 4}", "saturation.max_trials is 4, below num_samples (6)"),
    ("{rise: 0}", "`search.saturation.rise`: Input should be greater than 0"),
])
def test_bad_saturation_settings_are_refused_in_one_line(tmp_path: Path, saturation: str, words: str) -> None:
    params = tmp_path / "params.yaml"
    params.write_text("datasets: [d]\nfamilies: [cfc]\nprepare: {d: {kind: xor}}\n"
                      f"search: {{num_samples: 6, round_size: 2, saturation: {saturation}}}\n")
    with pytest.raises(ConfigError) as err:
        load_params(params)
    assert words in str(err.value) and "\n" not in str(err.value)


def test_the_report_says_how_many_trials_a_still_rising_search_had() -> None:
    from pipeline.reporting.marks import NOT_SATURATED, Mark
    from pipeline.reporting.show_your_work import saturation_detail

    mark = Mark(NOT_SATURATED, "expected best 90.00 at 8 trials, 95.00 at 16")
    capped = saturation_detail(mark, {"n_trials": 16, "saturation": {"max_trials": 16}})
    assert capped.detail.endswith("(16 trials: still rising at the cap of 16)")
    short = saturation_detail(mark, {"n_trials": 10, "saturation": {"max_trials": 16}})
    assert short.detail.endswith("(10 trials: still rising when the dataset's budget ran out)")
    assert saturation_detail(mark, {"n_trials": 6}) == mark  # a search without saturation: as it was


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_real_saturating_search_stays_within_its_budget_and_records_it(project: Path,
                                                                        monkeypatch: pytest.MonkeyPatch,
                                                                        local_ray: None) -> None:
    import json

    from pipeline.config import SearchParams, XorParams
    from pipeline.config.saturation import SaturationParams
    from pipeline.data.contract import save_dataset
    from pipeline.data.kinds.xor import build as build_xor
    from pipeline.reporting.show_your_work import trial_scores
    from pipeline.stores.paths import processed_dir, search_result_path
    from pipeline.sweep.search import search_many

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    save_dataset(processed_dir(project, "x"), build_xor("x", XorParams(kind="xor", n_train=64, n_test=16, seed=5)))
    saturation = SaturationParams(enabled=True, min_trials=2, max_trials=6, rise=0.01)
    p = SearchParams(num_samples=4, round_size=2, max_concurrent=2, epochs=2, n_startup_trials=1, saturation=saturation)
    families = ["cfc", "lstm_dt"]
    records = search_many(project, "x", families, p)
    from pipeline.sweep.costs import trial_cost

    price = {f: trial_cost(f) for f in families}  # 4 trials a family, priced: one budget for both
    assert sum(r["n_trials"] * price[f] for f, r in records.items()) <= 4 * sum(price.values())
    for family, r in records.items():
        assert r["status"] == "ok" and r["saturation"] == saturation.model_dump()
        assert 2 <= r["n_trials"] <= 6 and r["n_trials"] % 2 == 0  # whole rounds, within the cap
        assert json.loads(search_result_path(project, "x", family).read_text()) == r
        if r["n_trials"] == 2:  # stopped after its first round: the pool saw a flat curve
            assert not rising(trial_scores(r), "max", 0.01)
    from pipeline.progress.read import TOTAL
    from pipeline.stores import tracking

    client = tracking.MlflowClient(tracking.tracking_uri(project))
    for family, r in records.items():  # the live display's total ended at the trials the family ran
        assert client.get_run(r["mlflow_parent_run_id"]).data.tags[TOTAL] == str(r["n_trials"]), family


def test_the_terminator_comparison_replays_a_recorded_search() -> None:
    from benchmarks.rules.terminator_compare import replay

    space = {"lr": {"type": "float", "low": 1e-4, "high": 1e-1, "log": True},
             "hidden_size": {"type": "int", "low": 8, "high": 64, "log": False, "step": 8},
             "optimizer": {"type": "categorical", "choices": ["adam", "rmsprop"]}}
    values = [0.5, 0.9, 0.6, 0.7, 0.95, 0.96, 0.96, 0.96]
    trials = [{"number": i, "status": "ok", "best_val": v,
               "config": {"lr": 10 ** (-4 + 0.4 * i), "hidden_size": 8 * (1 + i % 8), "optimizer": "adam", "batch_size": 32}}
              for i, v in enumerate(values)]
    rows = replay({"family": "f", "mode": "max", "space": space, "trials": trials}, error=1 / 54, rise=0.01)
    assert [r["n"] for r in rows] == [4, 6, 8]
    assert [r["best"] for r in rows] == [0.9, 0.96, 0.96]
    # the expected-best rule: rising while the best is a lucky draw among weak trials, then flat
    assert [r["expected_best_stops"] for r in rows] == [not rising(values[:n], "max", 0.01) for n in (4, 6, 8)]
    assert all(isinstance(r["terminator_stops"], bool) and r["regret_bound"] >= 0 for r in rows)
