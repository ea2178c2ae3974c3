"""BackgroundProducer: every item in order, made ahead in a thread that never outruns its queue; an
error in the thread reaches the consumer; closing (or leaving the block on an error or Ctrl-C) stops
the thread and closes its source."""

from __future__ import annotations

import itertools
import threading
import time

import pytest

from tinykg_train.scale.producer import BackgroundProducer


def test_every_item_arrives_in_order_with_its_index():
    with BackgroundProducer(range(50), lambda i, x: (i, x * x), depth=2) as produced:
        assert list(produced) == [(i, i * i) for i in range(50)]
    assert not produced.alive


def test_the_thread_makes_at_most_depth_items_ahead():
    made = []
    producer = BackgroundProducer(itertools.count(), lambda i, x: made.append(i) or i, depth=3)
    try:
        assert next(producer) == 0
        time.sleep(0.3)  # ample time to run ahead, were it allowed
        # the queue holds 3, and one more may be made and waiting to be put
        assert 1 <= len(made) <= 5
    finally:
        producer.close()
    assert not producer.alive


def test_an_error_in_the_thread_is_raised_in_the_consumer_at_its_item():
    def make(index, item):
        if index == 3:
            raise ValueError("bad item 3")
        return item

    producer = BackgroundProducer(range(10), make)
    got = []
    with pytest.raises(ValueError, match="bad item 3"), producer:
        for item in producer:
            got.append(item)
    assert got == [0, 1, 2] and not producer.alive


@pytest.mark.parametrize("error", [KeyboardInterrupt, RuntimeError])
def test_leaving_the_block_early_stops_the_thread_and_closes_the_source(error):
    closed = threading.Event()

    def endless():
        try:
            yield from itertools.count()
        finally:
            closed.set()

    producer = BackgroundProducer(endless(), lambda i, x: x, depth=2)
    with pytest.raises(error), producer:
        next(producer)
        raise error()
    assert not producer.alive and closed.is_set()
    with pytest.raises(StopIteration):
        next(producer)


def test_wait_seconds_counts_the_time_the_consumer_waited():
    def slow(index, item):
        time.sleep(0.02)
        return item

    with BackgroundProducer(range(10), slow, depth=2) as produced:
        assert list(produced) == list(range(10))
    assert produced.wait_seconds >= 0.1  # 10 items made 0.02 s each, the consumer idle
    assert produced.produced == 10


def test_depth_must_be_positive():
    with pytest.raises(ValueError, match="'depth' needs to be a positive integer"):
        BackgroundProducer(range(3), lambda i, x: x, depth=0)
