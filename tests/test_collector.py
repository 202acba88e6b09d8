"""freeze_survivors: garbage is collected first, what is alive then is skipped by later collections,
what is created afterwards is collected as before (pipeline/runtime/collector.py)."""

from __future__ import annotations

import gc
import weakref

import pytest

from pipeline.runtime.collector import freeze_survivors


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
