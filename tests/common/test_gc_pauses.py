"""frozen_heap: the objects alive when a test starts are out of the collector's reach for the test, and back after."""

import gc

import pytest

from code.common.gc_pauses import frozen_heap


def test_the_heap_is_frozen_inside_and_handed_back_after():
    held = [[index] for index in range(1000)]  # tracked objects alive at the start
    assert gc.get_freeze_count() == 0
    with frozen_heap():
        assert gc.get_freeze_count() >= len(held)
        cycle: list[object] = []
        cycle.append(cycle)  # a cycle made during the test is still the collector's
        del cycle
        assert gc.collect() >= 1
    assert gc.get_freeze_count() == 0


def test_the_heap_is_handed_back_when_the_test_fails():
    with pytest.raises(RuntimeError), frozen_heap():
        raise RuntimeError("the test failed")
    assert gc.get_freeze_count() == 0
