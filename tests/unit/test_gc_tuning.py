"""core/gc_tuning.py: a broker process's start-up heap leaves the collector's
view; what it allocates afterwards is still collected."""
from __future__ import annotations

import gc
import weakref

import pytest

from core.gc_tuning import freeze_startup_heap


@pytest.fixture
def restore_gc():
    yield
    gc.unfreeze()


class Node:
    def __init__(self):
        self.other = None


def test_what_exists_at_the_freeze_is_out_of_every_collection(restore_gc):
    before = [Node() for _ in range(100)]
    frozen = freeze_startup_heap()
    assert frozen >= len(before)
    assert all(not gc.is_finalized(n) for n in before)
    tracked = {id(o) for o in gc.get_objects()}
    assert not any(id(n) in tracked for n in before), "frozen objects are still in a generation"


def test_cycles_made_after_the_freeze_are_still_collected(restore_gc):
    freeze_startup_heap(collect=True)
    a, b = Node(), Node()
    a.other, b.other = b, a  # a reference cycle: only the collector frees it
    gone = weakref.ref(a)
    del a, b
    gc.collect()
    assert gone() is None


def test_collect_first_frees_garbage_instead_of_freezing_it(restore_gc):
    gc.unfreeze()
    a, b = Node(), Node()
    a.other, b.other = b, a
    gone = weakref.ref(a)
    del a, b
    freeze_startup_heap(collect=True)
    assert gone() is None
