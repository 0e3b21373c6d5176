"""``zoo compare``: both frameworks from the same init on the same batches. The comparison
is :mod:`zoo.compare`'s (its progress bar included); this prints its verdict."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from zoo.cli.errors import EXIT_FAILED, user_errors
from zoo.cli.output import emit_json, for_scripts, overrides_option, script_output
from zoo.recipe import load_recipe


@click.command()
@click.argument("recipe", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--steps", default=100, show_default=True, type=click.IntRange(1),
              help="Training steps compared, on the recipe's seeded batch order.")  # fmt: skip
@click.option("-o", "--out", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Report folder (default: compare-<recipe>-<time> in export.dir).")  # fmt: skip
@click.option("--speed-steps", default=50, show_default=True, type=click.IntRange(0),
              help="Timed training steps per framework; 0 skips speed and memory.")  # fmt: skip
@overrides_option
@for_scripts
@user_errors
def compare(
    recipe: Path, steps: int, out: Path | None, speed_steps: int, overrides: tuple[str, ...], quiet: bool,
    as_json: bool,
) -> None:  # fmt: skip
    """Both frameworks from the same init on the same batches: parity, speed and memory.

    Exits 1 when a parity section DIFFERS (the report says at which tensor or step).
    --quiet prints the verdict line.
    """
    from zoo.compare import compare as run_compare

    with script_output(quiet, as_json):
        result = run_compare(load_recipe(recipe, overrides), steps=steps, out=out, speed_steps=speed_steps)
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
