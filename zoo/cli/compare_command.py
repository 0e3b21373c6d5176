"""``zoo compare``: both frameworks from the same init on the same batches, for a recipe or a
user's checkpoint. The comparison is :mod:`zoo.compare`'s (its progress bar and its memory
check included); this prints its verdict."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from zoo.cli.errors import EXIT_FAILED, user_errors
from zoo.cli.output import emit_json, for_scripts, overrides_option, script_output
from zoo.compare.report import REPORT_FILES
from zoo.compare.source import is_checkpoint
from zoo.hardware import SetupError
from zoo.limits import MAX_BATCH_SIZE, MAX_COMPARE_STEPS
from zoo.overwrite import refuse_inputs_as_outputs


@click.command()
@click.argument("target", metavar="RECIPE|CHECKPOINT", type=click.Path(path_type=Path))
@click.option("--recipe", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
              help="With a CHECKPOINT: the recipe (data, optimizer, trainer) to compare it on "
              "(default: its run folder's recipe.yaml, or the recipe recorded in it).")  # fmt: skip
@click.option("--data", default=None,
              help="The data to compare on: a data source's name, or a YAML file with a data "
              "section.")  # fmt: skip
@click.option(
    "--batch-size",
    type=click.IntRange(1, MAX_BATCH_SIZE),
    default=None,
    help="Shorthand for --set data.batch_size=N.",
)
@click.option("--steps", default=100, show_default=True, type=click.IntRange(1, MAX_COMPARE_STEPS),
              help="Training steps compared, on the recipe's seeded batch order.")  # fmt: skip
@click.option("--forward-only", is_flag=True,
              help="Check the weights, forward pass and gradients only: no training, no speed.")  # fmt: skip
@click.option("-o", "--out", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Report folder (default: compare-<recipe>-<time> in export.dir).")  # fmt: skip
@click.option("--speed-steps", default=50, show_default=True, type=click.IntRange(0, MAX_COMPARE_STEPS),
              help="Timed training steps per framework; 0 skips speed and memory.")  # fmt: skip
@overrides_option
@for_scripts
@user_errors
def compare(
    target: Path, recipe: Path | None, data: str | None, batch_size: int | None, steps: int,
    forward_only: bool, out: Path | None, speed_steps: int, overrides: tuple[str, ...], quiet: bool,
    as_json: bool,
) -> None:  # fmt: skip
    """Both frameworks from the same init on the same batches: parity, speed and memory.

    RECIPE starts both twins from its seed (or its init.from); CHECKPOINT (a zoo checkpoint,
    trained or imported, a LoRA adapter, or a run folder) loads its weights into both: an
    adapter on the base it names, checked by its sha256. The peak memory is
    estimated first; a comparison that does not fit is refused (exit 2) with what would fit.
    Exits 1 when a parity section DIFFERS (the report says at which tensor or step).
    --quiet prints the verdict line.
    """
    checkpoint = target if is_checkpoint(target) else None
    if checkpoint is None and recipe is not None:
        raise click.UsageError("--recipe goes with a CHECKPOINT; the RECIPE given is already the recipe")
    if out is not None:  # a report file never lands on what the comparison reads
        reads = [path for path in (target, recipe, data and Path(data)) if path]
        refuse_inputs_as_outputs([out / name for name in REPORT_FILES], reads, SetupError, option="-o")
    overrides = (*overrides, f"data.batch_size={batch_size}") if batch_size else overrides
    # The package's verb, looked up when the command runs (the submodules above loaded it): a test
    # puts its stand-in there, and ``zoo.compare`` itself is the API's function once called.
    run_compare = sys.modules["zoo.compare"].compare
    with script_output(quiet, as_json):
        result = run_compare(
            recipe if checkpoint is not None else target, steps=steps, out=out, overrides=overrides,
            speed_steps=speed_steps, checkpoint=checkpoint, data=data, forward_only=forward_only,
        )  # fmt: skip
    if as_json:
        files = {k: str(v) for k, v in result.files.items()}
        emit_json({**result.report, "passed": result.passed, "files": files})
    elif quiet:
        verdicts = [line for line in result.text.splitlines() if line.startswith("verdict:")]
        click.echo(verdicts[-1] if verdicts else ("PASS" if result.passed else "DIFFERS"))
    else:
        click.echo(result.text)
    if not result.passed:
        sys.exit(EXIT_FAILED)
