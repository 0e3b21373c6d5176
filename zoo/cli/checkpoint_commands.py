"""``zoo inspect``, ``zoo evaluate``, ``zoo sample``: reading, scoring and running a common
checkpoint in either framework."""

from __future__ import annotations

import json
from pathlib import Path

import click

from zoo.cli.errors import user_errors
from zoo.cli.numbers import FiniteFloatRange
from zoo.cli.output import emit_json, for_scripts, framework_option, overrides_option, script_output, table
from zoo.limits import MAX_SAMPLE_LENGTH
from zoo.recipe.schema import SEED_LIMIT


@click.command()
@click.argument("checkpoint", type=click.Path(dir_okay=False, path_type=Path))
@for_scripts
@user_errors
def inspect(checkpoint: Path, as_json: bool, quiet: bool) -> None:
    """A checkpoint's metadata and tensor table."""
    from zoo.api import inspect_checkpoint

    info = inspect_checkpoint(checkpoint)
    if as_json:
        emit_json(info)
        return
    if quiet:
        meta = info["metadata"]
        config = meta.get("config") if isinstance(meta.get("config"), dict) else {}
        what = config.get("preset") or meta.get("architecture", "?")
        click.echo(f"{checkpoint}: {what}, {meta.get('task', '?')}, {len(info['tensors'])} tensors")
        return
    for key, value in info["metadata"].items():
        if key == "recipe":
            value = f"{{... {len(json.dumps(value))} characters; see --json}}"
        elif not isinstance(value, str):
            value = json.dumps(value)
        click.echo(f"{key}: {value}")
    click.echo()
    rows = [("TENSOR", "SHAPE", "DTYPE")] + [
        (n, "x".join(map(str, s)) or "scalar", d) for n, s, d in info["tensors"]
    ]
    table(rows)
    total = sum(_prod(s) for _, s, _ in info["tensors"])
    click.echo(f"\n{len(info['tensors'])} tensors, {total:,} values")


@click.command()
@click.argument("checkpoint", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--recipe", "recipe", required=True, type=click.Path(dir_okay=False, path_type=Path),
              help="The recipe whose data's test split is used.")  # fmt: skip
@framework_option
@overrides_option
@for_scripts
@user_errors
def evaluate(
    checkpoint: Path, recipe: Path, framework: str | None, overrides: tuple[str, ...], quiet: bool,
    as_json: bool,
) -> None:  # fmt: skip
    """Metrics of a checkpoint on a recipe's test split, in either framework."""
    from zoo.api import evaluate as run_evaluation

    with script_output(quiet, as_json):
        metrics = run_evaluation(checkpoint, recipe, framework or "lightning", overrides)
    if as_json:
        emit_json(metrics)
        return
    click.echo(", ".join(f"{k} {v:.6g}" for k, v in sorted(metrics.items())))


@click.command()
@click.argument("checkpoint", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--prompt", default="", help="Text to continue.")
@click.option("--length", default=200, show_default=True, type=click.IntRange(1, MAX_SAMPLE_LENGTH),
              help="Tokens to generate.")  # fmt: skip
@click.option("--temperature", default=0.0, show_default=True, type=FiniteFloatRange(0), help="0 is greedy.")
@click.option("--top-k", type=click.IntRange(1), default=None, help="Sample among the k most likely tokens.")
@click.option("--top-p", type=FiniteFloatRange(0, 1, min_open=True), default=None,
              help="Sample among the likeliest tokens whose probabilities add up to p.")  # fmt: skip
@click.option("--seed", default=0, show_default=True, type=click.IntRange(0, SEED_LIMIT - 1),
              help="Seed of the sampling (temperature > 0).")  # fmt: skip
@framework_option
@for_scripts
@user_errors
def sample(
    checkpoint: Path, prompt: str, length: int, temperature: float, top_k: int | None, top_p: float | None,
    seed: int, framework: str | None, as_json: bool, quiet: bool,
) -> None:  # fmt: skip
    """Generate text from a language-model checkpoint (greedy, or sampled with temperature, top-k, top-p).

    The text is the output in every mode but --json, which adds the token ids."""
    from zoo.sample import sample_tokens

    framework = framework or "lightning"
    with script_output(quiet, as_json):
        done = sample_tokens(checkpoint, prompt, length, temperature, framework, seed, top_k, top_p)
    if as_json:
        emit_json({
            "checkpoint": str(checkpoint), "framework": framework, "prompt": prompt, "text": done.text,
            "prompt_ids": done.prompt_ids, "ids": done.ids,
        })  # fmt: skip
        return
    click.echo(done.text)


def _prod(shape) -> int:
    result = 1
    for size in shape:
        result *= size
    return result
