"""Run folders stay inside ``export.dir`` and are never shared, whatever the name or timing."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest
from click.testing import CliRunner
from conftest import RECIPE, tiny

from zoo.cli import main
from zoo.hardware import SetupError
from zoo.runs import RunDir


def test_runs_started_together_each_get_their_own_folder(tmp_path):
    with ThreadPoolExecutor(8) as pool:
        paths = list(pool.map(lambda _: RunDir.create(tmp_path, "same-second").path, range(32)))
    assert len(set(paths)) == 32
    assert all(p.parent == tmp_path and p.is_dir() for p in paths)


@pytest.mark.parametrize("name", ["../escaped", "/tmp/absolute", "..", "a/b"])
def test_a_run_name_cannot_leave_the_export_dir(tmp_path, name):
    with pytest.raises(SetupError, match="is not a folder name"):
        RunDir.create(tmp_path / "runs", name)
    assert not (tmp_path / "escaped").exists()


def test_cli_refuses_an_escaping_run_name_before_training(tmp_path):
    runs = tmp_path / "runs"
    runs.mkdir()
    sets = [arg for o in tiny(runs, "export.run_name=../outside") for arg in ("--set", o)]
    result = CliRunner().invoke(main, ["train", str(RECIPE), *sets])
    assert result.exit_code == 2, result.output
    assert "export.run_name '../outside' is not a folder name" in result.output
    assert not (tmp_path / "outside").exists() and list(runs.iterdir()) == []


def test_an_export_dir_that_is_a_file_is_named(tmp_path):
    (tmp_path / "file").write_text("not a folder")
    with pytest.raises(SetupError, match="is a file, not a folder"):
        RunDir.create(tmp_path / "file", "run")
