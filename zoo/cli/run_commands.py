"""``zoo runs``, ``zoo runs show``, ``zoo plot``: finding runs again and looking at them.

Run folders are read as they are on disk (:mod:`zoo.runs.listing`), without a framework."""

from __future__ import annotations

from pathlib import Path

import click

from zoo.cli.errors import user_errors
from zoo.cli.output import FRAMEWORKS, dir_option, duration, emit_json, for_scripts, table
from zoo.overwrite import refuse_inputs_as_outputs
from zoo.plot import PlotError, plot_runs
from zoo.recipe import normalize_framework
from zoo.runs import RunDir, find_runs, next_commands, read_run, resolve_run
from zoo.runs.listing import STATUSES


@click.group(invoke_without_command=True)
@dir_option
@click.option("--framework", type=click.Choice(FRAMEWORKS), default=None,
              help="Only the runs of this framework.")  # fmt: skip
@click.option("--architecture", default=None, help="Only the runs of this architecture or preset.")
@click.option("--status", type=click.Choice(STATUSES), default=None, help="Only the runs in this state.")
@for_scripts
@click.pass_context
@user_errors
def runs(
    ctx: click.Context, root: Path, framework: str | None, architecture: str | None, status: str | None,
    as_json: bool, quiet: bool,
) -> None:  # fmt: skip
    """The runs under an export directory: status, best validation metric, duration, checkpoint.

    `zoo runs show RUN` prints one run's recipe, metrics and the commands that take it further.
    --quiet prints one run folder per line.
    """
    if ctx.invoked_subcommand is not None:
        return
    found = find_runs(root)
    if framework:
        found = [r for r in found if r.framework == normalize_framework(framework)]
    if architecture:
        found = [r for r in found if architecture in (r.architecture, r.recipe)]
    if status:
        found = [r for r in found if r.status == status]
    if as_json:
        emit_json([r.to_dict() for r in found])
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
            str(run.epochs), best, duration(run.seconds), "yes" if run.checkpoint else "-",
        ))  # fmt: skip
    table(rows)


@runs.command("show")
@click.argument("run")
@dir_option
@for_scripts
@user_errors
def runs_show(run: str, root: Path, as_json: bool, quiet: bool) -> None:
    """One run: its resolved recipe, its metrics and the commands that resume, evaluate, sample
    or fine-tune it. --quiet prints its status (finished, interrupted, diverged, running, damaged)."""
    info = read_run(resolve_run(run, root))
    if quiet:
        click.echo(info.status)
        return
    summary = RunDir(info.path).read_summary()
    commands = next_commands(info)
    recipe_file = info.path / "recipe.yaml"
    recipe_text = recipe_file.read_text(errors="replace") if recipe_file.is_file() else None
    if as_json:
        emit_json({**info.to_dict(), "summary": summary, "recipe_yaml": recipe_text, "commands": commands})
        return
    click.echo(f"run {info.path}")
    click.echo(f"status {info.status}" + (f" ({'; '.join(info.problems)})" if info.problems else ""))
    what = ", ".join(str(v or "?") for v in (info.recipe, info.framework, info.architecture, info.task))
    click.echo(f"recipe {what}")
    click.echo(f"epochs {info.epochs}, time {duration(info.seconds)}")
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


@click.command()
@click.argument("run_dirs", nargs=-1, required=True)
@click.option("-o", "--out", required=True, type=click.Path(dir_okay=False, path_type=Path),
              help="The PNG to write.")  # fmt: skip
@dir_option
@click.option("--title", default=None, help="A title over the figure.")
@click.option(
    "--label",
    "labels",
    multiple=True,
    help="A run's name in the legend, once per run in the runs' order (default: the folder's).",
)
@click.option("--log-loss", is_flag=True, help="Draw the loss (and bpc) on a log scale.")
@for_scripts
@user_errors
def plot(
    run_dirs: tuple[str, ...], out: Path, root: Path, title: str | None, labels: tuple[str, ...],
    log_loss: bool, as_json: bool, quiet: bool,
) -> None:  # fmt: skip
    """Loss and metric curves of several runs on one figure (a Lightning and a Keras run of one
    recipe overlay epoch for epoch). RUN is a run folder, or a run's name under --dir.

    --quiet prints the PNG's path."""
    folders = [resolve_run(run, root) for run in run_dirs]
    files = [f for folder in folders for f in Path(folder).rglob("*") if f.is_file()]  # metrics.csv, ...
    refuse_inputs_as_outputs([out], files, PlotError, option="-o")
    figure = plot_runs(folders, out, title, list(labels) or None, log_loss)
    if as_json:
        emit_json({"path": str(figure.path), "runs": [str(f) for f in folders], "panels": figure.panels})
    else:
        click.echo(str(figure.path) if quiet else f"wrote {figure.path}")
