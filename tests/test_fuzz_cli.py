"""Command lines as a careless user types them, drawn by Hypothesis: a command, then arguments
from a pool of real and broken paths, options of other commands, overrides and stray words.
Whatever the line, zoo answers with its own words (usage, an error line, or the work) and an
exit status of 0, 1 or 2: never a traceback (issue 16).

No line may start work that takes minutes: every recipe in the pool that would train is one
whose overrides or data are refused before a run begins, and checkpoints are made-up files.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from zoo.cli import main

COMMANDS = [
    ["list"], ["show"], ["validate"], ["schema"], ["inspect"], ["evaluate"], ["sample"], ["runs"],
    ["runs", "show"], ["plot"], ["import"], ["export"], ["tokenizer", "encode"], ["tokenizer", "train"],
    ["train"], ["finetune"], ["resume"], ["compare"], ["predict"],
]  # fmt: skip
OPTIONS = [
    "--json", "--quiet", "--set", "-o", "--out", "--format", "--framework", "--steps", "--checkpoint",
    "--architecture", "--overwrite", "--force", "--max-new-tokens", "--temperature", "--top-k",
    "--seed", "--help",
]  # fmt: skip
# (No NUL byte: a command line cannot carry one.)
WORDS = [
    "", " ", "-", "--", "cnn", "resnet18", "gpt2", "keras", "lightning", "jax", "onnx", "hf", "0", "-1",
    "1e999", "nan", "9" * 30, "é", "a=b", "trainer.max_epochs=0", "model.architecture=nope",
    "data.batch_size=true", "optimizer.lr=-1", "export.run_name=../x", "trainer=[", "{",
]  # fmt: skip


@pytest.fixture(scope="module")
def paths(tmp_path_factory) -> Iterator[list[str]]:
    """Files a user might point at by mistake; none of them lets a command start real work.
    The commands run in their folder: what they write by default (``tokenizer.json``, a run's
    folder) lands there."""
    root = tmp_path_factory.mktemp("fuzzcli")
    before = os.getcwd()
    os.chdir(root)
    (root / "empty.safetensors").write_bytes(b"")
    (root / "garbage.safetensors").write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00{not json")
    (root / "recipe.yaml").write_text("model: {architecture: convnet-tiny}\ndata: {name: nope}\n")
    (root / "list.yaml").write_text("- just\n- a list\n")
    (root / "binary.yaml").write_bytes(b"\xff\xfe\x00model")
    (root / "folder").mkdir()
    (root / "run").mkdir()
    (root / "run" / "metrics.csv").write_text("epoch,train_loss\n0,nan\n1,oops\n")
    (root / "link").symlink_to(root / "nowhere")
    names = ["empty.safetensors", "garbage.safetensors", "recipe.yaml", "list.yaml", "binary.yaml",
             "folder", "run", "link", "missing.yaml", "out/x.png"]  # fmt: skip
    try:
        yield [str(root / name) for name in names]
    finally:
        os.chdir(before)


FUZZ = settings(
    max_examples=150, deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)  # fmt: skip
ARGUMENT = st.sampled_from(OPTIONS) | st.sampled_from(WORDS)


@FUZZ
@given(data=st.data())
def test_any_command_line_ends_in_zoos_words(paths, data):
    command = data.draw(st.sampled_from(COMMANDS))
    arguments = data.draw(
        st.lists(st.sampled_from(paths) | st.sampled_from(OPTIONS) | st.sampled_from(WORDS), max_size=5)
    )
    result = CliRunner().invoke(main, [*command, *arguments])
    shown = result.output + (result.stderr if result.stderr_bytes else "")
    assert result.exit_code in (0, 1, 2), (command, arguments, shown)
    assert result.exception is None or isinstance(result.exception, SystemExit), (
        command, arguments, repr(result.exception),
    )  # fmt: skip
    assert "Traceback" not in shown, (command, arguments, shown)
