"""freeze_survivors: garbage is collected first, what is alive then is skipped by later collections,
what is created afterwards is collected as before; young_objects_only: a collection inside walks
what was made inside only, and everything is as before afterwards (pipeline/runtime/collector.py)."""

from __future__ import annotations

import gc
import weakref

import pytest

from pipeline.comparison.pairs import holm
from pipeline.runtime.collector import freeze_survivors, young_objects_only


class _Node:
    def __init__(self) -> None:
        self.other: _Node | None = None


def _cycle() -> weakref.ref:
    """A reference cycle no name refers to: only the cyclic collector frees it."""
    a, b = _Node(), _Node()
    a.other, b.other = b, a
    return weakref.ref(a)


@pytest.fixture
def thawed():
    yield
    gc.unfreeze()  # the test process must not keep the frozen objects out of its own collections


def test_garbage_is_collected_before_the_freeze(thawed):
    dead = _cycle()
    freeze_survivors()
    assert dead() is None


def test_survivors_are_frozen_and_later_objects_are_not(thawed):
    kept = _Node()
    tracked = freeze_survivors()
    assert gc.get_freeze_count() > 0
    assert not any(o is kept for o in gc.get_objects())  # skipped by every later collection
    later = _Node()
    assert any(o is later for o in gc.get_objects())
    assert tracked < gc.get_freeze_count()  # what is left to walk is a small part of what was alive


def test_cycles_made_after_the_freeze_are_still_collected(thawed):
    freeze_survivors()
    dead = _cycle()
    gc.collect()
    assert dead() is None


def _walked_by_a_full_collection() -> int:
    """How many objects the collector's oldest generation walked in one gc.collect()."""
    seen: list[int] = []

    def count(phase: str, info: dict) -> None:
        if phase == "stop" and info["generation"] == 2:
            seen.append(len(gc.get_objects(generation=2)))

    gc.callbacks.append(count)
    try:
        gc.collect()
    finally:
        gc.callbacks.remove(count)
    return seen[-1]


def test_inside_young_objects_only_a_collection_skips_the_older_heap_and_afterwards_nothing_is_frozen(thawed):
    gc.collect()
    assert gc.get_freeze_count() == 0
    before = _walked_by_a_full_collection()
    with young_objects_only():
        assert gc.get_freeze_count() > before // 2  # the older heap: out of the collector's walk
        made = [_Node() for _ in range(100)]
        inside = _walked_by_a_full_collection()
        ref = _cycle()
        gc.collect()
        assert ref() is None  # a cycle made inside is still collected
    assert gc.get_freeze_count() == 0  # unfrozen after
    assert inside < 1000 < before and len(made) == 100


def test_young_objects_only_leaves_a_freeze_of_the_survivors_in_force(thawed):
    freeze_survivors()
    frozen = gc.get_freeze_count()
    with young_objects_only():
        made = [_Node() for _ in range(1000)]
        assert gc.get_freeze_count() <= frozen  # nothing more frozen (a few frozen objects may be freed)
    assert gc.get_freeze_count() > frozen // 2  # not unfrozen: a trial's freeze_survivors stays in force
    assert len(made) == 1000


def test_holm_gives_the_same_adjusted_values_with_the_heap_frozen_around_statsmodels(thawed):
    from statsmodels.stats.multitest import multipletests

    pvalues = {"a": 0.01, "b": 0.04, "c": float("nan"), "d": 0.03}
    expected = multipletests([0.01, 0.04, 0.03], method="holm")[1]
    adjusted = holm(pvalues)
    assert [adjusted[k] for k in "abd"] == pytest.approx(list(expected)) and adjusted["c"] != adjusted["c"]
    assert gc.get_freeze_count() == 0
