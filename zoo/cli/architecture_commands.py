"""``zoo list``, ``zoo show``, ``zoo validate``, ``zoo schema``: what can be trained and how a
recipe reads. These import neither torch nor TensorFlow, so they answer in a moment."""

from __future__ import annotations

import errno
import json
from pathlib import Path

import click

from zoo import registry
from zoo.cli.errors import user_errors
from zoo.cli.output import emit_json, for_scripts, overrides_option, table, type_name
from zoo.recipe import Recipe
from zoo.recipe.loader import load_recipe_chain


@click.command("list")
@for_scripts
def list_(as_json: bool, quiet: bool) -> None:
    """The registered architectures and presets."""
    entries = registry.list_architectures()
    if as_json:
        emit_json([e.__dict__ for e in entries])
        return
    if quiet:
        click.echo("\n".join(e.name for e in entries))
        return
    rows = [("NAME", "FAMILY", "VARIANT", "KIND", "TASKS", "PARAMS", "FRAMEWORKS")]
    rows += [
        (
            e.name,
            e.family,
            e.variant or "-",
            e.kind,
            ",".join(e.tasks),
            f"{e.parameters:,}",
            ",".join(e.frameworks),
        )
        for e in entries
    ]
    table(rows)


@click.command()
@click.argument("name")
@for_scripts
@user_errors
def show(name: str, as_json: bool, quiet: bool) -> None:
    """An architecture's or preset's config fields: type, value, description.

    --quiet prints one FIELD=VALUE line per field (values as JSON)."""
    family = registry.get_family(name)
    config = registry.resolve_config(name)
    preset = registry.presets().get(name)
    values = config.model_dump(mode="json")  # a nested section (llama's rope_scaling) as JSON
    fields = [
        {"name": key, "type": type_name(info.annotation), "value": values[key],
         "description": info.description or ""}
        for key, info in family.config.model_fields.items()
        if key not in ("architecture", "preset")
    ]  # fmt: skip
    description = preset[1].description if preset else family.description
    doc = " ".join(family.config.__doc__.split()) if family.config.__doc__ else ""
    if as_json:
        emit_json({
            "name": name, "description": description, "family": family.name, "variant": config.variant(),
            "preset": bool(preset),
            "input_kind": family.input_kind, "tasks": list(family.tasks), "doc": doc, "fields": fields,
            "data_fields": list(family.config.DATA_FIELDS),
        })  # fmt: skip
        return
    if quiet:
        for field in fields:
            click.echo(f"{field['name']}={json.dumps(field['value'])}")
        return
    click.echo(f"{name}: {description}")
    variant = f" ({config.variant()})" if config.variant() else ""
    click.echo(f"family {family.name}{variant}, input {family.input_kind}, tasks {', '.join(family.tasks)}")
    if doc:
        click.echo("\n" + doc)
    click.echo()
    rows = [("FIELD", "TYPE", "VALUE", "DESCRIPTION")]
    rows += [(f["name"], f["type"], json.dumps(f["value"]), f["description"]) for f in fields]
    table(rows)
    if family.config.DATA_FIELDS:
        click.echo(f"\nTaken from the data unless set: {', '.join(family.config.DATA_FIELDS)}")


@click.command()
@click.argument("recipe", type=click.Path(dir_okay=False, path_type=Path))
@overrides_option
@click.option("--show", is_flag=True,
              help="Print the resolved recipe headed by the files it was built from (its base: chain), "
              "also with --quiet; with --json: {\"bases\": [...], \"recipe\": {...}}.")  # fmt: skip
@for_scripts
@user_errors
def validate(recipe: Path, overrides: tuple[str, ...], show: bool, as_json: bool, quiet: bool) -> None:
    """Validate a recipe and print it resolved (bases merged, presets expanded, defaults filled).

    --quiet prints nothing: the exit status is the verdict (0 valid, 2 with the errors on stderr)."""
    resolved, bases = load_recipe_chain(recipe, overrides)
    if as_json:
        emit_json({"bases": bases, "recipe": resolved.to_dict()} if show else resolved.to_dict())
    elif show:
        for file in [*bases, str(recipe)]:
            click.echo(f"# {'base' if file in bases else 'recipe'}: {file}")
        click.echo(resolved.to_yaml(), nl=False)
    elif not quiet:
        click.echo(resolved.to_yaml(), nl=False)


@click.command()
@click.option("-o", "--out", "--output", "output", type=click.Path(dir_okay=False, path_type=Path),
              help="Write to a file. (--output is the older spelling.)")  # fmt: skip
@for_scripts
@user_errors
def schema(output: Path | None, as_json: bool, quiet: bool) -> None:
    """The recipe's JSON Schema (for editor completion and checking).

    Without -o the schema itself is the output (in every mode); with -o, --json says
    {"path": ...} and --quiet prints the path."""
    document = Recipe.model_json_schema(by_alias=True)
    if not output:
        click.echo(json.dumps(document, indent=2))
        return
    if not output.parent.is_dir():
        raise FileNotFoundError(
            errno.ENOENT, "no such folder; create it first or write elsewhere", str(output.parent)
        )
    output.write_text(json.dumps(document, indent=2) + "\n")
    if as_json:
        emit_json({"path": str(output)})
    else:
        click.echo(str(output) if quiet else f"wrote {output}")
