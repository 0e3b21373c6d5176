"""Counts on the command line (issue 38, item 6): each has an upper bound, and what a count
allocates is in the memory estimate.

``zoo compare ADAPTER --steps 1000000000`` grew by 60 MB/s until killed: every compared step
keeps its training batch in both frameworks (zoo.compare.steps.training_batches), and the
estimate did not count them. Now --steps is bounded, and the estimate counts the batches the
steps keep, so a count the machine cannot hold is refused before anything is built, with the
step count that would fit.
"""

from __future__ import annotations

import pytest
from click.testing import CliRunner
from compare_cases import RECIPE, quick

from zoo import peak_memory
from zoo.cli import main
from zoo.data import steps_per_epoch
from zoo.limits import MAX_BATCH_SIZE, MAX_COMPARE_STEPS, MAX_HEADS, MAX_MIN_FREQUENCY, MAX_TOP_K

TINY = "convnet-tiny"


@pytest.mark.parametrize(
    ("command", "option", "bound"),
    [
        (["compare", RECIPE], "--steps", MAX_COMPARE_STEPS),
        (["compare", RECIPE], "--speed-steps", MAX_COMPARE_STEPS),
        (["compare", RECIPE], "--batch-size", MAX_BATCH_SIZE),
        (["predict", "none.safetensors", "x.png"], "--top-k", MAX_TOP_K),
        (["predict", "none.safetensors", "x.png"], "--batch-size", MAX_BATCH_SIZE),
        (["sample", "none.safetensors"], "--top-k", MAX_TOP_K),
        (["tokenizer", "train"], "--min-frequency", MAX_MIN_FREQUENCY),
        (["import", "none.pth", "-o", "out.safetensors"], "--num-heads", MAX_HEADS),
    ],
)
def test_every_count_option_has_an_upper_bound(tmp_path, command, option, bound):
    """One past the bound (and 10**24, which overflowed the BPE trainer's 64-bit count) is refused
    by the option's name and range, before anything is read or built."""
    for value in (bound + 1, 10**24):
        result = CliRunner().invoke(main, [*map(str, command), option, str(value)])
        assert result.exit_code == 2 and f"'{option}'" in result.output, result.output
        assert f"<={bound}" in result.output and "Traceback" not in result.output, result.output


def test_every_int_option_of_the_cli_is_bounded():
    """Nothing unbounded is added later: each integer option has a maximum."""
    import click

    def commands(group):
        for command in group.commands.values():
            yield from commands(command) if isinstance(command, click.Group) else [command]

    unbounded = [
        f"zoo {command.name} {param.opts[0]}"
        for command in commands(main)
        for param in command.params
        if (isinstance(param.type, click.IntRange) and param.type.max is None) or param.type is click.INT
    ]
    assert not unbounded, unbounded


def setup_of(tmp_path):
    from zoo.compare.runner import resolve
    from zoo.compare.twins import prepare

    return prepare(resolve(RECIPE, quick(TINY, tmp_path), None, None))


def test_the_compare_estimate_counts_the_batches_its_steps_keep(tmp_path):
    """Ten thousand steps keep ten thousand batches in each framework: at least their bytes
    more than two steps, the measured 5 KB of tensor objects a step on top."""
    from zoo.compare import runner

    setup = setup_of(tmp_path)
    seen = {}

    def spy(estimate, fits, available=None):
        seen[len(seen)] = estimate
        raise peak_memory.MemoryShort("stop")

    batch = runner._batch_bytes(setup)
    assert batch == 16 * 8 * 8 * 4 + 16 * 8  # 16 float32 images of 8 x 8, their int64 labels
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(peak_memory.AVAILABLE_VARIABLE, "1")  # nothing fits: the estimate is made
        patch.setattr(peak_memory, "check_memory", spy)
        for steps in (2, 10_000):
            with pytest.raises(peak_memory.MemoryShort):
                runner.check_memory(setup, training=True, steps=steps)
    few, many = seen[0], seen[1]
    grown = many.total - few.total
    per_epoch = steps_per_epoch(len(setup.dataset.train), setup.batch_size)
    assert grown >= (10_000 - per_epoch) * (2 * batch + peak_memory.BATCH_OBJECT_BYTES), (few, many)
    assert many.parts["training batches"] == peak_memory.compared_batches(10_000, per_epoch) * (
        2 * batch + peak_memory.BATCH_OBJECT_BYTES
    )


def test_a_step_count_that_does_not_fit_is_refused_before_anything_is_built(monkeypatch, tmp_path):
    """Between the estimates of 100 and 100,000 steps: refused with the step count that fits,
    before a batch is drawn or a twin built (which ran for hours, growing, before)."""
    from zoo.compare import compare, runner, steps, twins

    setup = setup_of(tmp_path)
    per_epoch = steps_per_epoch(len(setup.dataset.train), setup.batch_size)
    sizes = {}
    for count in (100, MAX_COMPARE_STEPS):
        estimate = peak_memory.compare_estimate(
            setup.recipe, setup.family, setup.config, setup.dataset.train.x[: setup.batch_size],
            fine_tune=False, training=True, batch_bytes=runner._batch_bytes(setup),
            kept_batches=peak_memory.compared_batches(count, per_epoch),
        )  # fmt: skip
        sizes[count] = estimate.total
    monkeypatch.setenv(peak_memory.AVAILABLE_VARIABLE, str((sizes[100] + sizes[MAX_COMPARE_STEPS]) // 2))

    def never(*args, **kwargs):
        raise AssertionError("the comparison started")

    monkeypatch.setattr(twins, "build_twins", never)
    monkeypatch.setattr(steps, "training_batches", never)
    with pytest.raises(peak_memory.MemoryShort, match=r"; or --steps 10000 \(each step keeps its batch\)"):
        compare(RECIPE, steps=MAX_COMPARE_STEPS, overrides=quick(TINY, tmp_path), write=False)
