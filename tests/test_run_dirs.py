"""Run folders stay inside ``export.dir`` and are never shared, whatever the name or timing."""

from __future__ import annotations

import errno
import os
from concurrent.futures import ThreadPoolExecutor

import click
import pytest
from click.testing import CliRunner
from conftest import RECIPE, tiny

from zoo.cli import main, user_errors
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
    # Refused as the recipe is validated (zoo validate says the same), before any folder exists.
    assert "export.run_name: '../outside' is not a folder name" in result.output
    assert not (tmp_path / "outside").exists() and list(runs.iterdir()) == []


def test_an_export_dir_that_is_a_file_is_named(tmp_path):
    (tmp_path / "file").write_text("not a folder")
    with pytest.raises(SetupError, match="is a file, not a folder"):
        RunDir.create(tmp_path / "file", "run")


def test_a_dangling_link_as_export_dir_is_named_with_its_target(tmp_path):
    (tmp_path / "runs").symlink_to(tmp_path / "gone")
    with pytest.raises(SetupError, match=r"'.*runs' is a symbolic link to '.*gone', which does not exist"):
        RunDir.create(tmp_path / "runs" / "below", "run")
    assert not (tmp_path / "gone").exists()


def test_a_run_name_longer_than_a_folder_name_can_be_is_refused_before_anything_is_made(tmp_path):
    with pytest.raises(SetupError, match=r"run_name is 300 bytes long; a folder name holds at most 255"):
        RunDir.create(tmp_path / "runs", "r" * 300)
    assert not (tmp_path / "runs").exists()


def test_an_export_dir_the_system_refuses_is_one_line_not_a_traceback(tmp_path):
    """A name too long for the file system, met by ``mkdir``: the path, the system's words and
    what would work, exit status 2."""
    sets = [arg for o in tiny(tmp_path / ("d" * 300)) for arg in ("--set", o)]
    result = CliRunner().invoke(main, ["train", str(RECIPE), *sets])
    assert result.exit_code == 2
    assert "File name too long; use a shorter name (at most 255 bytes" in result.output
    assert "Traceback" not in result.output


@pytest.mark.parametrize(
    ("code", "status", "remedy"),
    [
        (errno.ENOSPC, 1, "free some space and run again; files written before are kept"),
        (errno.EACCES, 2, "choose a folder you can write to"),
        (errno.EROFS, 2, "the file system is read-only"),
    ],
)
def test_a_failed_write_ends_with_the_path_and_what_would_work(code, status, remedy):
    """What a full disk or a read-only folder does to any command: one line, the status of
    whose fault it is (the machine's: 1; the chosen path's: 2). Root ignores permissions, so the
    error is raised rather than provoked."""

    @click.command()
    @user_errors
    def writes() -> None:
        raise OSError(code, os.strerror(code), "/runs/r/model.safetensors")

    result = CliRunner().invoke(writes, [])
    assert result.exit_code == status
    assert result.output.startswith(f"error: /runs/r/model.safetensors: {os.strerror(code)}; {remedy}")
    assert result.output.count("\n") == 1


def test_a_full_disk_during_a_move_names_the_destination():
    """Lightning writes a state to a temporary file in /tmp and moves it into the run: the
    error names both, and the one that matters is where it was going."""

    @click.command()
    @user_errors
    def moves() -> None:
        state = "/runs/r/state/.step-4.ckpt.tmp"
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), "/tmp/tmpab12", None, state)

    result = CliRunner().invoke(moves, [])
    assert result.exit_code == 1
    assert result.output.startswith("error: /runs/r/state/.step-4.ckpt.tmp: No space left on device; free")
