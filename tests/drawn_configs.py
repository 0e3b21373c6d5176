"""Random transformers configs drawn once per test session for the reference environment to build:
each class in turn, the same examples every run (the reference runs them all in one interpreter,
not one per example). Used by the decoder families' tests (``test_llama.py``, ``test_gemma.py``)."""

from __future__ import annotations

import itertools
from collections.abc import Callable

from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st


def drawn_configs(
    strategy: Callable[[str], st.SearchStrategy], types: tuple[str, ...], count: int
) -> list[dict]:
    """``count`` examples of ``strategy(model_type)``, the ``types`` in turn, each named
    ``random-I``."""
    per_type = -(-count // len(types))
    groups: list[list[dict]] = []
    for model_type in types:
        drawn: list[dict] = []

        @settings(
            max_examples=per_type, derandomize=True, database=None, deadline=None,
            phases=[Phase.generate], suppress_health_check=list(HealthCheck),
        )  # fmt: skip
        @given(strategy(model_type))
        def collect(case):
            drawn.append(case)  # noqa: B023 (run at once, in this iteration)

        collect()
        groups.append(drawn[:per_type])
    found = [case for group in itertools.zip_longest(*groups) for case in group if case is not None]
    return [{**case, "name": f"random-{i}"} for i, case in enumerate(found[:count])]
