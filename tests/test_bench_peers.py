"""bench/peers.py's arithmetic: contenders take turns in rotated order, a ratio pairs the two
sides of one round (not the medians of each), and outputs that differ stop it before timing."""

from __future__ import annotations

import numpy as np
import pytest
from bench_scripts import load_bench_script


@pytest.fixture(scope="module")
def peers():
    return load_bench_script("peers")


def test_contenders_take_turns_in_rotated_order(peers):
    calls = []

    def contender(name):
        def timed(repeats):
            calls.append((name, repeats))
            return float(len(calls))

        return timed

    times = peers.rounds({n: contender(n) for n in "abc"}, repeats=4, count=3)
    assert calls[:3] == [("a", 1), ("b", 1), ("c", 1)]  # the warm-up, one call each
    assert [name for name, _ in calls[3:]] == list("abcbcacab")
    assert all(repeats == 4 for _, repeats in calls[3:])
    assert {name: len(seconds) for name, seconds in times.items()} == {"a": 3, "b": 3, "c": 3}


def test_a_ratio_pairs_the_peer_and_zoo_of_the_same_round(peers):
    # a slow round slows both sides: per round the peer is twice zoo's time every time, while
    # the ratio of the two medians would say 1.0
    times = {"peer": [2.0, 8.0, 40.0], "zoo": [1.0, 4.0, 20.0]}
    assert peers.ratio_cell(times, "peer", "zoo") == "**2.00** (2.00-2.00)"
    times = {"peer": [1.0, 3.0, 2.0], "zoo": [1.0, 1.0, 1.0]}
    assert peers.ratio_cell(times, "peer", "zoo") == "**2.00** (1.00-3.00)"


def test_outputs_that_differ_from_the_peers_stop_the_bench(peers):
    want = np.linspace(-1, 1, 12).reshape(3, 4)
    assert peers.close("same", want + 1e-7, want) < 1e-6
    with pytest.raises(SystemExit, match="differ from the peer's"):
        peers.close("off", want + 1e-2, want)
    with pytest.raises(SystemExit, match="shape"):
        peers.close("cut", want[:2], want)
