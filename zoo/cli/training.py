"""``zoo train``, ``zoo finetune``, ``zoo resume``: the commands that run a training loop.

The training's progress goes to stderr (zoo.progress: the framework's bar on a terminal, one line
per epoch elsewhere; off with ``--quiet``); every one of these ends with the same report: run
folder, checkpoint, metrics.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import click

from zoo.api import resume as resume_run
from zoo.api import train as run_training
from zoo.cli.errors import fail, user_errors
from zoo.cli.numbers import FiniteFloatRange
from zoo.cli.output import emit_json, for_scripts, framework_option, overrides_option, script_output
from zoo.recipe import load_recipe
from zoo.runs import Interrupted, is_primary_process

NO_BAR = ["trainer.progress_bar=false"]


@click.command()
@click.argument("recipe", type=click.Path(dir_okay=False, path_type=Path))
@framework_option
@overrides_option
@for_scripts
@user_errors
def train(
    recipe: Path, framework: str | None, overrides: tuple[str, ...], quiet: bool, as_json: bool
) -> None:
    """Train a recipe, evaluate on its test split, export the common checkpoint."""
    _train(load_recipe(recipe, [*overrides, *(NO_BAR if quiet else [])]), framework, quiet, as_json)


@click.command()
@click.argument("recipe", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--from", "source", required=True, type=click.Path(dir_okay=False, path_type=Path),
              help="A common checkpoint from either framework.")  # fmt: skip
@click.option("--freeze-backbone", is_flag=True, help="Train only the head.")
@click.option("--reset-head", is_flag=True, help="Re-initialise the head even where its shape still fits.")
@click.option("--head-lr", type=FiniteFloatRange(min=0, min_open=True), help="The head's own learning rate.")
@framework_option
@overrides_option
@for_scripts
@user_errors
def finetune(
    recipe: Path, source: Path, freeze_backbone: bool, reset_head: bool, head_lr: float | None,
    framework: str | None, overrides: tuple[str, ...], quiet: bool, as_json: bool,
) -> None:  # fmt: skip
    """Train a recipe starting from a checkpoint (new head where the data changes its shape)."""
    extra = [f"init.from={source}"]
    extra += ["init.freeze_backbone=true"] if freeze_backbone else []
    extra += ["init.reset_head=true"] if reset_head else []
    extra += [f"init.head_lr={head_lr}"] if head_lr else []
    extra += NO_BAR if quiet else []
    _train(load_recipe(recipe, [*overrides, *extra]), framework, quiet, as_json)


@click.command()
@click.argument("run_dir", type=click.Path(file_okay=False, path_type=Path))
@click.option("--force", is_flag=True, help="Continue although the run's recipe.yaml was edited.")
@for_scripts
@user_errors
def resume(run_dir: Path, force: bool, quiet: bool, as_json: bool) -> None:
    """Continue an interrupted run from its newest saved state. A finished run is said to be
    finished and left as it is (--json: already_finished true)."""
    with stopped_by_ctrl_c(), script_output(quiet, as_json):
        result = resume_run(run_dir, force=force)
    report(result, quiet, as_json, {"already_finished": result.already_finished})


def _train(resolved, framework: str | None, quiet: bool, as_json: bool) -> None:
    with stopped_by_ctrl_c(), script_output(quiet, as_json):
        result = run_training(resolved, framework)
    report(result, quiet, as_json)


@contextlib.contextmanager
def stopped_by_ctrl_c() -> Iterator[None]:
    """A Ctrl-C that stopped the run at once (outside the training loop, or a second one) ends as
    one that stopped it at a step end (zoo.runs.signals): one line and 130, not click's
    ``Aborted!`` and 1, so a script tells an interrupted run from a failed one."""
    try:
        yield
    except KeyboardInterrupt:
        fail(f"training stopped: {Interrupted()}", Interrupted.exit_status)


def report(result, quiet: bool = False, as_json: bool = False, extra: dict | None = None) -> None:
    """A finished run: ``--json`` {run_dir, checkpoint, framework, metrics, ``extra``...};
    ``--quiet`` the checkpoint's path; else the test metrics, the time and where everything is."""
    if not is_primary_process():
        return  # the other ranks of a data-parallel run: rank 0 reports
    metrics = result.metrics
    if as_json:
        emit_json({
            "run_dir": str(result.run_dir), "checkpoint": str(result.checkpoint),
            "framework": result.framework, "metrics": metrics, **(extra or {}),
        })  # fmt: skip
        return
    if quiet:
        click.echo(str(result.checkpoint))
        return
    click.echo()
    click.echo(f"{result.run_dir.name} ({result.framework}): " + ", ".join(
        f"{k} {v:.4f}" for k, v in metrics.items() if k.startswith("test_")
    ))  # fmt: skip
    trained = f"trained in {metrics['train_seconds']:.1f} s"
    if result.already_finished:
        trained = f"finished already ({trained}): nothing resumed, nothing changed"
    click.echo(f"{trained}; run folder {result.run_dir}")
    click.echo(f"checkpoint {result.checkpoint}")
