"""One spelling across commands: every option that names where a command writes is `-o/--out`
(an older `--output` still accepted where it existed)."""

from __future__ import annotations

import click
import pytest
from click.testing import CliRunner

from zoo.cli import main


def commands(group: click.Group, prefix: str = "zoo") -> list[tuple[str, click.Command]]:
    found = []
    for name, command in group.commands.items():
        if isinstance(command, click.Group):
            found += commands(command, f"{prefix} {name}")
        else:
            found.append((f"{prefix} {name}", command))
    return found


def output_options() -> list[tuple[str, click.Option]]:
    return [
        (name, option)
        for name, command in commands(main)
        for option in command.params
        if isinstance(option, click.Option) and {"-o", "--out", "--output"} & set(option.opts)
    ]


def test_every_output_option_is_o_or_out():
    found = output_options()
    names = {name for name, _ in found}
    # The commands that write a file or folder a user names.
    assert {
        "zoo schema",
        "zoo compare",
        "zoo import",
        "zoo export",
        "zoo tokenizer train",
        "zoo plot",
    } <= names
    for name, option in found:
        assert option.opts[:2] == ["-o", "--out"], f"{name}: {option.opts}"


@pytest.mark.parametrize("spelling", ["-o", "--out", "--output"])
def test_schema_writes_with_every_spelling(tmp_path, spelling):
    out = tmp_path / "recipe.schema.json"
    result = CliRunner().invoke(main, ["schema", spelling, str(out), "--quiet"])
    assert result.exit_code == 0, result.output
    assert result.output.strip() == str(out) and '"properties"' in out.read_text()
