"""``zoo inspect``, ``zoo evaluate``, ``zoo sample``, ``zoo predict``: reading, scoring and
running a common checkpoint in either framework."""

from __future__ import annotations

import json
from pathlib import Path

import click

from zoo.api import evaluate as run_evaluation
from zoo.api import inspect_checkpoint
from zoo.cli.errors import user_errors
from zoo.cli.numbers import FiniteFloatRange
from zoo.cli.output import emit_json, for_scripts, framework_option, overrides_option, script_output, table
from zoo.limits import MAX_BATCH_SIZE, MAX_SAMPLE_LENGTH, MAX_TOP_K
from zoo.recipe.trainer import SEED_LIMIT
from zoo.sample import sample_tokens
from zoo.sampling import MAX_REPETITION_PENALTY


@click.command()
@click.argument("checkpoint", type=click.Path(path_type=Path))
@for_scripts
@user_errors
def inspect(checkpoint: Path, as_json: bool, quiet: bool) -> None:
    """A checkpoint's (or a LoRA adapter's, or a run folder's) metadata and tensor table."""
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
@click.argument("checkpoint", type=click.Path(path_type=Path))
@click.option("--recipe", "recipe", type=click.Path(dir_okay=False, path_type=Path),
              help="The recipe whose data's test split is used (default: the checkpoint's own, its run "
              "folder's recipe.yaml or the recipe recorded in it).")  # fmt: skip
@framework_option
@overrides_option
@for_scripts
@user_errors
def evaluate(
    checkpoint: Path, recipe: Path | None, framework: str | None, overrides: tuple[str, ...], quiet: bool,
    as_json: bool,
) -> None:  # fmt: skip
    """Metrics of a checkpoint on a recipe's test split (the checkpoint's own recipe without
    --recipe), in either framework."""
    with script_output(quiet, as_json):
        metrics = run_evaluation(checkpoint, recipe, framework or "lightning", overrides)
    if as_json:
        emit_json(metrics)
        return
    click.echo(", ".join(f"{k} {v:.6g}" for k, v in sorted(metrics.items())))


@click.command()
@click.argument("checkpoint", type=click.Path(path_type=Path))
@click.option("--prompt", default=None, help="Text to continue (default: from the start token).")
@click.option("--prompts", "prompts_file", type=click.File("r", encoding="utf-8"), default=None,
              help="A file of prompts, one a line (blank lines skipped; - is stdin).")  # fmt: skip
@click.option("--length", default=200, show_default=True, type=click.IntRange(1, MAX_SAMPLE_LENGTH),
              help="Tokens to generate.")  # fmt: skip
@click.option("--temperature", default=0.0, show_default=True, type=FiniteFloatRange(0), help="0 is greedy.")
@click.option("--top-k", type=click.IntRange(1, MAX_TOP_K), default=None,
              help="Sample among the k most likely tokens.")  # fmt: skip
@click.option("--top-p", type=FiniteFloatRange(0, 1, min_open=True), default=None,
              help="Sample among the likeliest tokens whose probabilities add up to p.")  # fmt: skip
@click.option("--repetition-penalty", default=1.0, show_default=True,
              type=FiniteFloatRange(0, MAX_REPETITION_PENALTY, min_open=True),
              help="Divide the positive logits and multiply the negative ones of tokens already in the text "
              "(1 is none; transformers' repetition_penalty).")  # fmt: skip
@click.option("--stop", "stops", multiple=True,
              help="End a text just after this string once generated; repeatable.")  # fmt: skip
@click.option("--seed", default=0, show_default=True, type=click.IntRange(0, SEED_LIMIT - 1),
              help="Seed of the sampling (temperature > 0).")  # fmt: skip
@click.option("--batch-size", default=8, show_default=True, type=click.IntRange(1, MAX_BATCH_SIZE),
              help="Prompts generated together (left-padded).")  # fmt: skip
@click.option("--ignore-eos", is_flag=True,
              help="Go on past the end-of-sequence token (by default generation stops there).")  # fmt: skip
@framework_option
@for_scripts
@user_errors
def sample(
    checkpoint: Path, prompt: str | None, prompts_file, length: int, temperature: float, top_k: int | None,
    top_p: float | None, repetition_penalty: float, stops: tuple[str, ...], seed: int, batch_size: int,
    ignore_eos: bool, framework: str | None, as_json: bool, quiet: bool,
) -> None:  # fmt: skip
    """Generate text from a language-model checkpoint, a LoRA adapter or a run folder (greedy, or
    sampled with temperature, top-k, top-p), up to --length tokens, the end-of-sequence token or
    a --stop string.

    The text is the output in every mode but --json, which adds the token ids and why generation
    stopped ("stop": "eos", "stop" or "length"). With --prompts each prompt's text follows a line
    "--- N ---" (N from 1), and --json writes a list."""
    if prompt is not None and prompts_file is not None:
        raise click.UsageError("give --prompt or --prompts, not both")
    prompts: str | list[str] = "" if prompt is None else prompt
    if prompts_file is not None:
        prompts = [line for line in prompts_file.read().splitlines() if line.strip()]
        if not prompts:
            raise click.BadParameter(
                f"{prompts_file.name} has no prompts: write one a line", param_hint="'--prompts'"
            )
    framework = framework or "lightning"
    with script_output(quiet, as_json):
        done = sample_tokens(
            checkpoint, prompts, length, temperature, framework, seed, top_k, top_p, ignore_eos=ignore_eos,
            repetition_penalty=repetition_penalty, stop=stops, batch_size=batch_size,
        )  # fmt: skip
    many = isinstance(prompts, list)
    if as_json:
        documents = [
            {"checkpoint": str(checkpoint), "framework": framework, "prompt": text, "text": each.text,
             "prompt_ids": each.prompt_ids, "ids": each.ids, "stop": each.stop}
            for text, each in zip(prompts if many else [prompts], done if many else [done], strict=True)
        ]  # fmt: skip
        emit_json(documents if many else documents[0])
        return
    for number, each in enumerate(done if many else [done], 1):
        if many:
            click.echo(f"--- {number} ---")
        click.echo(each.text)


@click.command()
@click.argument("checkpoint")
@click.argument("inputs", nargs=-1)
@click.option("--text", "texts", multiple=True, help="A text to predict on, besides INPUTS; repeatable.")
@framework_option
@click.option("--top-k", default=5, show_default=True, type=click.IntRange(1, MAX_TOP_K),
              help="Labels shown per input (tokens per mask for a masked language model).")  # fmt: skip
@click.option("--batch-size", default=32, show_default=True, type=click.IntRange(1, MAX_BATCH_SIZE),
              help="Inputs per forward pass.")  # fmt: skip
@click.option("--length", default=50, show_default=True, type=click.IntRange(1, MAX_SAMPLE_LENGTH),
              help="A language model's tokens generated per input.")  # fmt: skip
@click.option("--temperature", default=0.0, show_default=True, type=FiniteFloatRange(0),
              help="A language model's sampling temperature; 0 is greedy.")  # fmt: skip
@click.option("--seed", default=0, show_default=True, type=click.IntRange(0, SEED_LIMIT - 1),
              help="Seed of the sampling (temperature > 0).")  # fmt: skip
@for_scripts
@user_errors
def predict(
    checkpoint: str, inputs: tuple[str, ...], texts: tuple[str, ...], framework: str | None, top_k: int,
    batch_size: int, length: int, temperature: float, seed: int, as_json: bool, quiet: bool,
) -> None:  # fmt: skip
    """Labels and scores (or generated text) of a checkpoint for your own inputs, with the
    preprocessing it records (image size, crop, mean/std, tokenizer, label names).

    CHECKPOINT is a zoo checkpoint, a run folder, or a transformers / timm folder or a torchvision
    state dict (imported on the fly, as zoo.load does). INPUTS are image files, folders and globs
    (quoted), .txt files (one text a line), .jsonl files (one object a line, at the model's text
    column) or .npy arrays in the model's layout. --quiet prints one line per input: its name and
    top label (a language model: the text)."""
    from zoo import inference

    framework = framework or "lightning"
    with script_output(quiet, as_json):
        done = inference.predict(
            checkpoint, inputs, texts=texts, framework=framework, top_k=top_k, batch_size=batch_size,
            length=length, temperature=temperature, seed=seed,
        )  # fmt: skip
    if as_json:
        emit_json({
            "checkpoint": str(done.checkpoint), "framework": framework, "task": done.task,
            "predictions": [p.to_dict() for p in done.predictions],
        })  # fmt: skip
        return
    for prediction in done.predictions:
        if quiet:
            click.echo(
                prediction.top if prediction.text is not None else f"{prediction.input}\t{prediction.top}"
            )
        else:
            click.echo(f"{prediction.input}: {_described(prediction)}")


def _described(prediction) -> str:
    """One prediction in words: labels with their scores, the generated text, or each token's."""
    if prediction.labels is not None:
        return ", ".join(f"{p['label']} {p['score']:.3f}" for p in prediction.labels)
    if prediction.text is not None:
        return prediction.text
    return " ".join(
        f"{t['token']}/{t['label']}" if "label" in t
        else f"[{t['position']}] " + ", ".join(f"{c['token']} {c['score']:.3f}" for c in t["tokens"]) + ";"
        for t in prediction.tokens or []
    )  # fmt: skip


def _prod(shape) -> int:
    result = 1
    for size in shape:
        result *= size
    return result
