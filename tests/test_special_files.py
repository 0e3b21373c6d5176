"""Inputs that are not regular files (issue 38, item 6): a FIFO, a character device, a socket.

``mkfifo f.png; zoo predict CKPT f.png`` blocked forever: opening a FIFO for reading waits for a
writer. Every command that reads files now refuses such a path in one line, exit 2, naming it and
what it is, before opening it (zoo.limits.require_regular_file; the CLI checks every path
argument once, in zoo.cli.errors.user_errors). A folder holding one does not block either.

Each FIFO here has a writer that opens and closes it whenever a reader waits, so that a command
that still opens one gets an empty file and fails the test instead of hanging the suite.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import RECIPE

import zoo
from zoo.checkpoint.file import CheckpointError
from zoo.checkpoint.metadata import read_checkpoint
from zoo.cli import main
from zoo.limits import read_json, require_regular_file, special_file


@pytest.fixture
def fifo(tmp_path):
    """A function making FIFOs under tmp_path, each released to any reader within 0.05 s."""
    made: list[Path] = []
    done = threading.Event()

    def release() -> None:
        while not done.is_set():
            for path in made:
                with contextlib.suppress(OSError):  # ENXIO: nobody reads it now
                    os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
            time.sleep(0.05)

    def make(name: str) -> Path:
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        os.mkfifo(path)
        made.append(path)
        return path

    thread = threading.Thread(target=release, daemon=True)
    thread.start()
    yield make
    done.set()
    thread.join()


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> Path:
    model = zoo.create_model("convnet-tiny", framework="lightning", seed=0)
    return zoo.save_checkpoint(model, tmp_path_factory.mktemp("ckpt") / "model.safetensors")


def invoke(*args) -> tuple[int, str]:
    result = CliRunner().invoke(main, [str(a) for a in args])
    assert "Traceback" not in result.output and isinstance(result.exception, SystemExit | None), (
        f"{result.exception!r}\n{result.output}"
    )
    return result.exit_code, result.output


def refused(args, path: Path, kind: str = "a FIFO (named pipe)") -> None:
    code, out = invoke(*args)
    lines = [line for line in out.strip().splitlines() if not line.startswith("zoo: ")]  # info
    assert code == 2 and len(lines) == 1, out
    assert lines[0].replace("error: --data ", "error: ") == (
        f"error: {path} is {kind}, not a regular file: a pipe or device would block or never end; "
        "give a regular file"
    ), out


@pytest.mark.parametrize(
    "command",
    [
        lambda f, ckpt, tmp: (["predict", ckpt, f("in.png")], "in.png"),
        lambda f, ckpt, tmp: (["predict", f("m.safetensors"), tmp / "x.png"], "m.safetensors"),
        lambda f, ckpt, tmp: (["inspect", f("m.safetensors")], "m.safetensors"),
        lambda f, ckpt, tmp: (["evaluate", f("m.safetensors"), "--recipe", RECIPE], "m.safetensors"),
        lambda f, ckpt, tmp: (["evaluate", ckpt, "--recipe", f("r.yaml")], "r.yaml"),
        lambda f, ckpt, tmp: (["train", f("r.yaml")], "r.yaml"),
        lambda f, ckpt, tmp: (["validate", f("r.yaml")], "r.yaml"),
        lambda f, ckpt, tmp: (["finetune", RECIPE, "--from", f("m.safetensors")], "m.safetensors"),
        lambda f, ckpt, tmp: (["compare", f("r.yaml")], "r.yaml"),
        lambda f, ckpt, tmp: (["compare", ckpt, "--recipe", RECIPE, "--data", f("d.yaml")], "d.yaml"),
        lambda f, ckpt, tmp: (["tokenizer", "train", f("t.txt"), "-o", tmp / "t.json"], "t.txt"),
        lambda f, ckpt, tmp: (["tokenizer", "encode", f("tok.json"), "hi"], "tok.json"),
        lambda f, ckpt, tmp: (["import", f("w.safetensors"), "-o", tmp / "o.safetensors"], "w.safetensors"),
        lambda f, ckpt, tmp: (
            ["export", f("m.safetensors"), "--format", "onnx", "-o", tmp / "m.onnx"],
            "m.safetensors",
        ),
    ],
    ids=[
        "predict-input",
        "predict-checkpoint",
        "inspect",
        "evaluate-checkpoint",
        "evaluate-recipe",
        "train",
        "validate",
        "finetune",
        "compare",
        "compare-data",
        "tokenizer-train",
        "tokenizer-encode",
        "import",
        "export",
    ],
)
def test_every_command_refuses_a_fifo_in_one_line(fifo, checkpoint, tmp_path, command):
    args, name = command(fifo, checkpoint, tmp_path)
    refused(args, tmp_path / name)


def test_a_folder_holding_a_fifo_does_not_block_predict(fifo, checkpoint, tmp_path):
    inside = fifo("images/0/a.png")
    refused(["predict", checkpoint, tmp_path / "images"], inside)


def test_a_device_and_a_socket_are_refused_naming_what_they_are(checkpoint, tmp_path):
    device = tmp_path / "zero.safetensors"
    device.symlink_to("/dev/zero")  # read without end: 60 MB/s into memory until killed
    refused(["inspect", device], device, "a character device")
    image = tmp_path / "z.png"
    image.symlink_to("/dev/zero")
    refused(["predict", checkpoint, image], image, "a character device")
    server = socket.socket(socket.AF_UNIX)
    try:
        server.bind(str(tmp_path / "s.yaml"))
        refused(["train", tmp_path / "s.yaml"], tmp_path / "s.yaml", "a socket")
    finally:
        server.close()


def test_the_library_refuses_them_too(fifo, tmp_path):
    """zoo.load, read_checkpoint and every JSON read go through the same check."""
    path = fifo("m.safetensors")
    with pytest.raises(CheckpointError, match=r"is a FIFO \(named pipe\), not a regular file"):
        read_checkpoint(path)
    with pytest.raises(CheckpointError, match=r"is a FIFO \(named pipe\), not a regular file"):
        zoo.load(path)
    with pytest.raises(ValueError, match=r"is a FIFO \(named pipe\), not a regular file"):
        read_json(fifo("config.json"), error=ValueError)


def test_what_counts_as_special():
    assert special_file("/dev/null") == "a character device"
    assert special_file(__file__) is None and special_file(Path(__file__).parent) is None
    assert special_file("/no/such/file") is None  # the caller's own words say it is missing
    require_regular_file(__file__, ValueError)
    with pytest.raises(ValueError, match="/dev/null is a character device"):
        require_regular_file("/dev/null", ValueError)


def test_an_image_folder_and_a_run_folder_name_a_fifo_they_hold(fifo, tmp_path):
    """A recipe's image folder checks its files before training (data.check_files), and zoo runs
    reads each run's recipe.yaml: neither opens a FIFO, each names it (an empty read would not)."""
    from zoo.data.image_folder import problem
    from zoo.runs.listing import read_run

    assert problem(fifo("images/cat/a.png"), decode=False) == "is a FIFO (named pipe), not a regular file"
    run = tmp_path / "run"
    fifo("run/recipe.yaml")
    problems = read_run(run).problems
    assert any("recipe.yaml is a FIFO (named pipe), not a regular file" in p for p in problems), problems


def test_a_fifo_shard_is_named_before_it_is_read(fifo):
    from zoo.data.shards import find_shards
    from zoo.errors import DataError

    with pytest.raises(DataError, match=r"corpus.jsonl is a FIFO \(named pipe\), not a regular file"):
        find_shards([str(fifo("corpus.jsonl"))], "data.path")
