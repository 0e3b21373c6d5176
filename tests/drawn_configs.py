"""Random transformers configs drawn once per test session for the reference environment to build:
each class in turn, the same examples every run (the reference runs them all in one interpreter,
not one per example). Used by the decoder families' tests (``test_llama.py``, ``test_gemma.py``)."""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import reference_env
from conftest import eval_output, relative_error
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


def reference_built(
    script: str, out: Path, strategy, types: tuple[str, ...], count: int
) -> tuple[Path, list[dict]]:
    """The drawn configs, built, randomised and run by ``tests/reference/<script> OUT random``."""
    cases = drawn_configs(strategy, types, count)
    (out / "configs.json").write_text(json.dumps(cases))
    return reference_env.run(script, out, "random", str(out / "configs.json")), cases


def assert_twins_are_transformers(reference: Path, case: dict, tmp_path: Path, bound: float) -> None:
    """Both twins on the case's imported weights: transformers' logits on its padded batch, real tokens."""
    import zoo
    from zoo.interchange.importing import import_checkpoint

    name = case["name"]
    checkpoint = import_checkpoint(reference / name, tmp_path / "zoo").path
    ids, padding = np.load(reference / f"{name}-inputs.npy"), np.load(reference / f"{name}-padding.npy")
    expected = np.load(reference / f"{name}-logits.npy")
    for framework in ("lightning", "keras"):
        got = eval_output(zoo.load_checkpoint(checkpoint, framework=framework), ids, padding)
        assert relative_error(got[~padding], expected[~padding]) <= bound, (framework, case["config"])
