"""The ``zoo`` command: a thin layer over the Python API.

User mistakes (a bad recipe, a broken checkpoint, unusable data) end with one clear
paragraph on stderr and exit code 2, never a traceback.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import os
import sys
import typing
from pathlib import Path

import click

from zoo import registry
from zoo.recipe import Recipe, RecipeError, load_recipe

EXIT_USAGE = 2


def user_errors(fn):
    """Errors a user can fix end with a message and exit code 2; a run that stops, with 1."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        from zoo.checkpoint import CheckpointError, NonFiniteTensors
        from zoo.data import DataError
        from zoo.hardware import SetupError
        from zoo.runs import NonFiniteLoss
        from zoo.sample import PromptError

        fixable = (
            SetupError, RecipeError, DataError, CheckpointError, registry.UnknownArchitectureError,
            FileNotFoundError, PromptError,
        )  # fmt: skip
        try:
            return fn(*args, **kwargs)
        except fixable as error:
            click.echo(f"error: {error}", err=True)
            sys.exit(EXIT_USAGE)
        except NonFiniteLoss as error:
            click.echo(f"training stopped: {error}", err=True)
            sys.exit(1)
        except NonFiniteTensors as error:  # a diverged model: a failed run, not a typo
            click.echo(f"error: {error}", err=True)
            sys.exit(1)
        except Exception as error:
            from zoo.nn.errors import input_error

            found = input_error(error)  # a graph assertion carrying a zoo input check's message
            if found is None:
                raise
            click.echo(f"error: {found}", err=True)
            sys.exit(EXIT_USAGE)

    return wrapper


overrides_option = click.option(
    "--set", "overrides", multiple=True, metavar="a.b=VALUE",
    help="Override a recipe field (value parsed as YAML); repeatable.",
)  # fmt: skip
framework_option = click.option(
    "--framework", type=click.Choice(["lightning", "torch", "keras"]), default=None,
    help="Framework to run in (default: the recipe's trainer.framework).",
)  # fmt: skip
quiet_option = click.option(
    "-q", "--quiet", is_flag=True,
    help="No progress bars or messages: only the result (errors still on stderr).",
)  # fmt: skip
json_option = click.option(
    "--json", "as_json", is_flag=True,
    help="Print one JSON document on stdout and nothing else there (progress goes to stderr).",
)  # fmt: skip


@contextlib.contextmanager
def script_output(quiet: bool, as_json: bool):
    """Keep stdout for the result while a command works.

    With ``--json`` whatever else would reach stdout (Lightning's and Keras' progress bars, a
    library's prints, C++ logging) goes to stderr, at the file-descriptor level too, so a
    script can parse stdout; with ``--quiet`` it is dropped, and zoo's messages below warnings.
    """
    if not (quiet or as_json):
        yield
        return
    if quiet:
        logging.getLogger("zoo").setLevel(logging.WARNING)
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # read when TensorFlow loads
    sink = open(os.devnull, "w") if quiet else sys.stderr  # noqa: SIM115 (closed below)
    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(sink.fileno() if quiet else 2, 1)
    try:
        with contextlib.redirect_stdout(sink):
            yield
    finally:
        sink.flush()
        os.dup2(saved, 1)
        os.close(saved)
        if quiet:
            sink.close()


def _json(document) -> None:
    click.echo(json.dumps(document, indent=2, default=str))


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="zoo")
def main() -> None:
    """Train, fine-tune and compare architectures in PyTorch/Lightning and Keras 3."""
    import logging

    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("zoo: %(message)s"))
    logger = logging.getLogger("zoo")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)


@main.command("list")
@json_option
@quiet_option
def list_(as_json: bool, quiet: bool) -> None:
    """The registered architectures and presets."""
    entries = registry.list_architectures()
    if as_json:
        click.echo(json.dumps([e.__dict__ for e in entries], indent=2))
        return
    if quiet:
        click.echo("\n".join(e.name for e in entries))
        return
    rows = [("NAME", "FAMILY", "KIND", "TASKS", "PARAMS", "FRAMEWORKS")]
    rows += [
        (e.name, e.family, e.kind, ",".join(e.tasks), f"{e.parameters:,}", ",".join(e.frameworks))
        for e in entries
    ]
    _table(rows)


@main.command()
@click.argument("name")
@user_errors
def show(name: str) -> None:
    """An architecture's or preset's config fields: type, value, description."""
    family = registry.get_family(name)
    config = registry.resolve_config(name)
    preset = registry.presets().get(name)
    click.echo(f"{name}: {preset[1].description if preset else family.description}")
    click.echo(f"family {family.name}, input {family.input_kind}, tasks {', '.join(family.tasks)}")
    if family.config.__doc__:
        click.echo("\n" + " ".join(family.config.__doc__.split()))
    click.echo()
    rows = [("FIELD", "TYPE", "VALUE", "DESCRIPTION")]
    for field_name, info in family.config.model_fields.items():
        if field_name in ("architecture", "preset"):
            continue
        value = getattr(config, field_name)
        rows.append((field_name, _type_name(info.annotation), json.dumps(value), info.description or ""))
    _table(rows)
    if family.config.DATA_FIELDS:
        click.echo(f"\nTaken from the data unless set: {', '.join(family.config.DATA_FIELDS)}")


@main.command()
@click.argument("recipe", type=click.Path(dir_okay=False, path_type=Path))
@overrides_option
@user_errors
def validate(recipe: Path, overrides: tuple[str, ...]) -> None:
    """Validate a recipe and print it resolved (presets expanded, defaults filled)."""
    click.echo(load_recipe(recipe, overrides).to_yaml(), nl=False)


@main.command()
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), help="Write to a file.")
def schema(output: Path | None) -> None:
    """The recipe's JSON Schema (for editor completion and checking)."""
    text = json.dumps(Recipe.model_json_schema(by_alias=True), indent=2) + "\n"
    if output:
        output.write_text(text)
        click.echo(f"wrote {output}")
    else:
        click.echo(text, nl=False)


@main.command()
@click.argument("recipe", type=click.Path(dir_okay=False, path_type=Path))
@framework_option
@overrides_option
@quiet_option
@json_option
@user_errors
def train(
    recipe: Path, framework: str | None, overrides: tuple[str, ...], quiet: bool, as_json: bool
) -> None:
    """Train a recipe, evaluate on its test split, export the common checkpoint."""
    quiet_bar = ["trainer.progress_bar=false"] if quiet else []
    _train(load_recipe(recipe, [*overrides, *quiet_bar]), framework, quiet, as_json)


@main.command()
@click.argument("recipe", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--from", "source", required=True, type=click.Path(dir_okay=False, path_type=Path),
              help="A common checkpoint from either framework.")  # fmt: skip
@click.option("--freeze-backbone", is_flag=True, help="Train only the head.")
@click.option("--reset-head", is_flag=True, help="Re-initialise the head even where its shape still fits.")
@click.option("--head-lr", type=click.FloatRange(min=0, min_open=True), help="The head's own learning rate.")
@framework_option
@overrides_option
@quiet_option
@json_option
@user_errors
def finetune(
    recipe: Path, source: Path, freeze_backbone: bool, reset_head: bool, head_lr, framework, overrides,
    quiet: bool, as_json: bool,
):  # fmt: skip
    """Train a recipe starting from a checkpoint (new head where the data changes its shape)."""
    extra = [f"init.from={source}"]
    extra += ["init.freeze_backbone=true"] if freeze_backbone else []
    extra += ["init.reset_head=true"] if reset_head else []
    extra += [f"init.head_lr={head_lr}"] if head_lr else []
    extra += ["trainer.progress_bar=false"] if quiet else []
    _train(load_recipe(recipe, [*overrides, *extra]), framework, quiet, as_json)


@main.command()
@click.argument("run_dir", type=click.Path(file_okay=False, path_type=Path))
@click.option("--force", is_flag=True, help="Continue although the run's recipe.yaml was edited.")
@quiet_option
@json_option
@user_errors
def resume(run_dir: Path, force: bool, quiet: bool, as_json: bool) -> None:
    """Continue an interrupted run from its newest saved state."""
    from zoo.api import resume as resume_run

    with script_output(quiet, as_json):
        result = resume_run(run_dir, force=force)
    _report(result, quiet, as_json)


def _train(resolved, framework: str | None, quiet: bool = False, as_json: bool = False) -> None:
    from zoo.api import train as run_training

    with script_output(quiet, as_json):
        result = run_training(resolved, framework)
    _report(result, quiet, as_json)


def _report(result, quiet: bool = False, as_json: bool = False) -> None:
    from zoo.runs import is_primary_process

    if not is_primary_process():
        return  # the other ranks of a data-parallel run: rank 0 reports
    metrics = result.metrics
    if as_json:
        _json({
            "run_dir": str(result.run_dir), "checkpoint": str(result.checkpoint),
            "framework": result.framework, "metrics": metrics,
        })  # fmt: skip
        return
    if quiet:
        click.echo(str(result.checkpoint))
        return
    click.echo()
    click.echo(f"{result.run_dir.name} ({result.framework}): " + ", ".join(
        f"{k} {v:.4f}" for k, v in metrics.items() if k.startswith("test_")
    ))  # fmt: skip
    click.echo(f"trained in {metrics['train_seconds']:.1f} s; run folder {result.run_dir}")
    click.echo(f"checkpoint {result.checkpoint}")


@main.command()
@click.argument("checkpoint", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--recipe", "recipe", required=True, type=click.Path(dir_okay=False, path_type=Path),
              help="The recipe whose data's test split is used.")  # fmt: skip
@framework_option
@overrides_option
@quiet_option
@json_option
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
        _json(metrics)
        return
    click.echo(", ".join(f"{k} {v:.6g}" for k, v in sorted(metrics.items())))


@main.command()
@click.argument("checkpoint", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--prompt", default="", help="Text to continue.")
@click.option("--length", default=200, show_default=True, type=click.IntRange(1), help="Tokens to generate.")
@click.option("--temperature", default=0.0, show_default=True, type=click.FloatRange(0), help="0 is greedy.")
@click.option("--top-k", type=click.IntRange(1), default=None, help="Sample among the k most likely tokens.")
@click.option("--top-p", type=click.FloatRange(0, 1, min_open=True), default=None,
              help="Sample among the likeliest tokens whose probabilities add up to p.")  # fmt: skip
@click.option("--seed", default=0, show_default=True, help="Seed of the sampling (temperature > 0).")
@framework_option
@user_errors
def sample(
    checkpoint: Path, prompt: str, length: int, temperature: float, top_k: int | None, top_p: float | None,
    seed: int, framework,
) -> None:  # fmt: skip
    """Generate text from a language-model checkpoint (greedy, or sampled with temperature, top-k, top-p)."""
    from zoo.sample import sample as generate

    text = generate(checkpoint, prompt, length, temperature, framework or "lightning", seed, top_k, top_p)
    click.echo(text)


@main.command()
@click.argument("recipe", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--steps", default=100, show_default=True, type=click.IntRange(1),
              help="Training steps compared, on the recipe's seeded batch order.")  # fmt: skip
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Report folder (default: compare-<recipe>-<time> in export.dir).")  # fmt: skip
@click.option("--speed-steps", default=50, show_default=True, type=click.IntRange(0),
              help="Timed training steps per framework; 0 skips speed and memory.")  # fmt: skip
@overrides_option
@quiet_option
@json_option
@user_errors
def compare(
    recipe: Path, steps: int, out: Path | None, speed_steps: int, overrides: tuple[str, ...], quiet: bool,
    as_json: bool,
) -> None:  # fmt: skip
    """Both frameworks from the same init on the same batches: parity, speed and memory.

    Exits 1 when a parity section DIFFERS (the report says at which tensor or step).
    """
    from zoo.compare import compare as run_compare

    with script_output(quiet, as_json):
        result = run_compare(load_recipe(recipe, overrides), steps=steps, out=out, speed_steps=speed_steps)
    if as_json:
        files = {k: str(v) for k, v in result.files.items()}
        _json({**result.report, "passed": result.passed, "files": files})
    elif quiet:
        verdicts = [line for line in result.text.splitlines() if line.startswith("verdict:")]
        click.echo(verdicts[-1] if verdicts else ("PASS" if result.passed else "DIFFERS"))
    else:
        click.echo(result.text)
    if not result.passed:
        sys.exit(1)


@main.command("import")
@click.argument("src", type=click.Path(path_type=Path))
@click.option(
    "--out",
    required=True,
    type=click.Path(path_type=Path),
    help="The zoo checkpoint to write: a .safetensors path, or a directory for model.safetensors.",
)
@click.option("--format", "format_", default=None, help="Source layout (torchvision, timm...); default: any.")
@click.option("--architecture", default=None, help="A family or preset the weights must be.")
@click.option("--overwrite", is_flag=True, help="Replace an existing checkpoint at --out.")
@user_errors
def import_(src: Path, out: Path, format_: str | None, architecture: str | None, overwrite: bool) -> None:
    """A foreign checkpoint (torchvision / timm state dict or directory) -> a zoo checkpoint."""
    from zoo.interchange import import_checkpoint

    done = import_checkpoint(src, out, format=format_, architecture=architecture, overwrite=overwrite)
    what = done.config.preset or done.family.name
    click.echo(f"{done.path}: {what} ({done.format.name} layout, {done.tensors} tensors)")


@main.command("export")
@click.argument("checkpoint", type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--format",
    "format_",
    required=True,
    help="A deployment format (onnx, savedmodel, torch-export) or a weight layout (torchvision, "
    "timm, hf...).",
)
@click.option(
    "--out",
    required=True,
    type=click.Path(path_type=Path),
    help="onnx: a .onnx file; savedmodel: a directory; torch-export: a .pt2 file. Weight layouts: a "
    ".safetensors or .pth/.pt file, or a directory (model.safetensors + config.json).",
)
@click.option(
    "--framework",
    type=click.Choice(["lightning", "torch", "keras"]),
    default=None,
    help="The twin an onnx file is made from (default: the checkpoint's); savedmodel is Keras', "
    "torch-export torch's.",
)
@click.option("--overwrite", is_flag=True, help="Replace existing files at --out.")
@user_errors
def export(checkpoint: Path, format_: str, out: Path, framework: str | None, overwrite: bool) -> None:
    """A zoo checkpoint -> a deployable model (run and checked against the training model) or a
    foreign weight layout (read back and checked bit for bit)."""
    from zoo.deploy import FORMATS, export_model

    if format_ in FORMATS:
        report = export_model(checkpoint, format_, out, framework=framework, overwrite=overwrite)
        click.echo(report.summary())
        return
    if framework is not None:
        raise click.UsageError(f"--framework is for the formats {', '.join(FORMATS)}, not {format_!r}")
    from zoo.interchange import export_checkpoint

    path = export_checkpoint(checkpoint, format_, out, overwrite=overwrite)
    click.echo(f"{path}: {format_} layout, read back and checked")


@main.command()
@click.argument("checkpoint", type=click.Path(dir_okay=False, path_type=Path))
@json_option
@quiet_option
@user_errors
def inspect(checkpoint: Path, as_json: bool, quiet: bool) -> None:
    """A checkpoint's metadata and tensor table."""
    from zoo.api import inspect_checkpoint

    info = inspect_checkpoint(checkpoint)
    if as_json:
        click.echo(json.dumps(info, indent=2))
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
    _table(rows)
    total = sum(_prod(s) for _, s, _ in info["tensors"])
    click.echo(f"\n{len(info['tensors'])} tensors, {total:,} values")


dir_option = click.option(
    "--dir", "root", type=click.Path(file_okay=False, path_type=Path), default=Path("checkpoints"),
    show_default=True, help="The export directory the runs are in (a recipe's export.dir).",
)  # fmt: skip


@main.group(invoke_without_command=True)
@dir_option
@click.option("--framework", type=click.Choice(["lightning", "torch", "keras"]), default=None,
              help="Only the runs of this framework.")  # fmt: skip
@click.option("--architecture", default=None, help="Only the runs of this architecture or preset.")
@click.option("--status", type=click.Choice(["finished", "interrupted", "diverged", "running", "damaged"]),
              default=None, help="Only the runs in this state.")  # fmt: skip
@json_option
@quiet_option
@click.pass_context
@user_errors
def runs(ctx, root: Path, framework, architecture, status, as_json: bool, quiet: bool) -> None:
    """The runs under an export directory: status, best validation metric, duration, checkpoint.

    `zoo runs show RUN` prints one run's recipe, metrics and the commands that take it further.
    """
    if ctx.invoked_subcommand is not None:
        return
    from zoo.recipe import normalize_framework
    from zoo.runs import find_runs

    found = find_runs(root)
    if framework:
        found = [r for r in found if r.framework == normalize_framework(framework)]
    if architecture:
        found = [r for r in found if architecture in (r.architecture, r.recipe)]
    if status:
        found = [r for r in found if r.status == status]
    if as_json:
        _json([r.to_dict() for r in found])
        return
    if quiet:
        for run in found:
            click.echo(str(run.path))
        return
    if not found:
        click.echo(f"no runs under {root}" + (" that match" if framework or architecture or status else ""))
        return
    rows = [("RUN", "STATUS", "RECIPE", "FRAMEWORK", "ARCHITECTURE", "EPOCHS", "BEST", "TIME", "CHECKPOINT")]
    for run in found:
        best = f"{run.best[0]} {run.best[1]:.4g} (ep {run.best[2]})" if run.best else "-"
        status_text = run.status if not run.problems else f"{run.status}: {'; '.join(run.problems)}"
        rows.append((
            run.path.name, status_text, run.recipe or "?", run.framework or "?", run.architecture or "?",
            str(run.epochs), best, _duration(run.seconds), "yes" if run.checkpoint else "-",
        ))  # fmt: skip
    _table(rows)


@runs.command("show")
@click.argument("run")
@dir_option
@json_option
@user_errors
def runs_show(run: str, root: Path, as_json: bool) -> None:
    """One run: its resolved recipe, its metrics and the commands that resume, evaluate, sample
    or fine-tune it."""
    from zoo.runs import RunDir, next_commands, read_run, resolve_run

    info = read_run(resolve_run(run, root))
    summary = RunDir(info.path).read_summary()
    commands = next_commands(info)
    recipe_file = info.path / "recipe.yaml"
    recipe_text = recipe_file.read_text(errors="replace") if recipe_file.is_file() else None
    if as_json:
        _json({**info.to_dict(), "summary": summary, "recipe_yaml": recipe_text, "commands": commands})
        return
    click.echo(f"run {info.path}")
    click.echo(f"status {info.status}" + (f" ({'; '.join(info.problems)})" if info.problems else ""))
    what = ", ".join(str(v or "?") for v in (info.recipe, info.framework, info.architecture, info.task))
    click.echo(f"recipe {what}")
    click.echo(f"epochs {info.epochs}, time {_duration(info.seconds)}")
    if info.best:
        click.echo(f"best {info.best[0]} {info.best[1]:.6g} at epoch {info.best[2]}")
    tested = {k: v for k, v in summary.get("metrics", {}).items() if k.startswith("test_")}
    if tested:
        click.echo("test " + ", ".join(f"{k.removeprefix('test_')} {v:.6g}" for k, v in tested.items()))
    if summary.get("status") == "diverged":
        click.echo(f"diverged at step {summary.get('step')}: {summary.get('error', '')}")
    click.echo(f"checkpoint {info.checkpoint or '(none)'}")
    if commands:
        click.echo("\ncommands:")
        width = max(len(name) for name in commands)
        for name, command in commands.items():
            click.echo(f"  {name.ljust(width)}  {command}")
    if recipe_text is not None:
        click.echo("\nrecipe.yaml:")
        click.echo(recipe_text.rstrip())


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    minutes, rest = divmod(round(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{rest:02d}s" if minutes else f"{seconds:.1f}s"


@main.command()
@click.argument("run_dirs", nargs=-1, required=True)
@click.option("-o", "--out", required=True, type=click.Path(dir_okay=False, path_type=Path),
              help="The PNG to write.")  # fmt: skip
@dir_option
@click.option("--title", default=None, help="A title over the figure.")
@user_errors
def plot(run_dirs: tuple[str, ...], out: Path, root: Path, title: str | None) -> None:
    """Loss and metric curves of several runs on one figure (a Lightning and a Keras run of one
    recipe overlay epoch for epoch). RUN is a run folder, or a run's name under --dir."""
    from zoo.plot import plot_runs
    from zoo.runs import resolve_run

    written = plot_runs([resolve_run(run, root) for run in run_dirs], out, title)
    click.echo(f"wrote {written}")


def _prod(shape) -> int:
    result = 1
    for size in shape:
        result *= size
    return result


def _table(rows: list[tuple[str, ...]]) -> None:
    widths = [max(len(str(row[i])) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        cells = [str(cell).ljust(width) for cell, width in zip(row, widths, strict=True)]
        click.echo("  ".join(cells).rstrip())


def _type_name(annotation) -> str:
    origin = typing.get_origin(annotation)
    if origin is typing.Literal:
        return "|".join(str(a) for a in typing.get_args(annotation))
    if origin in (typing.Union, getattr(__import__("types"), "UnionType", None)):
        return " | ".join(_type_name(a) for a in typing.get_args(annotation))
    if origin is typing.Annotated:
        return _type_name(typing.get_args(annotation)[0])
    if origin is not None:
        args = ", ".join(_type_name(a) for a in typing.get_args(annotation))
        return f"{getattr(origin, '__name__', str(origin))}[{args}]"
    if annotation is type(None):
        return "None"
    return getattr(annotation, "__name__", str(annotation))


def _register_tokenizer_commands() -> None:
    from zoo.tokenizer_command import tokenizer

    main.add_command(tokenizer)


_register_tokenizer_commands()

if __name__ == "__main__":
    main()
