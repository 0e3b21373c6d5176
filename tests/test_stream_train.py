"""``zoo train`` on streamed corpora a user makes: one JSONL file of 150 long documents trains in
both frameworks from the same first batch; a shard changed or deleted while a run trains stops it
with one line (exit 2) and the state of the step before saved, and ``zoo resume`` re-indexes the
corpus and trains on."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from stream_corpus import text_of, write_corpus

from zoo.checkpoint.state import latest_state, step_of
from zoo.cli import main
from zoo.data.stream import Stream

RECIPE = Path(__file__).parent.parent / "recipes" / "gpt2-micro-stream.yaml"
TINY = [
    "model.n_layer=1", "model.n_embd=32", "model.n_head=2", "model.resid_dropout=0", "model.embd_dropout=0",
    "model.attn_dropout=0", "data.tokenizer=char", "trainer.max_epochs=1", "trainer.progress_bar=false",
    "optimizer.lr=0.001",
]  # fmt: skip


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("ZOO_CACHE", str(tmp_path / "cache"))


def zoo(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.output + (result.stderr if result.stderr_bytes else "")


def train(tmp_path, name: str, *overrides: str) -> tuple[int, str]:
    sets = [*TINY, f"export.dir={tmp_path}", f"export.run_name={name}", *overrides]
    return zoo("train", str(RECIPE), *[a for s in sets for a in ("--set", s)])


def long_documents(count: int, characters: int) -> list[str]:
    """Documents like source files: lines of words and symbols, ``characters`` long each."""
    rng = np.random.default_rng(0)
    words = ["def", "return", "self", "import", "(", ")", ":", "=", "x", "1", "# note", "'s'", "é", "→"]
    docs = []
    for _ in range(count):
        text = ""
        while len(text) < characters:
            text += " ".join(rng.choice(words, rng.integers(2, 12))) + ("\n" if rng.random() < 0.3 else " ")
        docs.append(text[:characters])
    return docs


@pytest.mark.slow  # two trainings of 50 steps: ~30 s on two shared cores
def test_one_file_of_150_long_documents_trains_in_both_frameworks_from_the_same_first_batch(tmp_path):
    """The issue's corpus (~450 KB in one JSONL file, far more than a read buffer): before the
    fix, the DataLoader workers forked after the memory estimate's first read shared its open
    file and read interleaved shares of it ('N tokens, the index says M', or a zip() error)."""
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"text": d}) + "\n" for d in long_documents(150, 3000)))
    losses = {}
    for framework in ("lightning", "keras"):
        code, out = train(
            tmp_path, framework, f"trainer.framework={framework}", f"data.path={corpus}", "data.seq_len=128",
            "data.batch_size=64", "data.workers=2",
        )  # fmt: skip
        assert code == 0, out
        summary = json.loads((tmp_path / framework / "summary.json").read_text())
        losses[framework] = summary["metrics"]["train_loss_first_batch"]
    assert losses["lightning"] == pytest.approx(losses["keras"], rel=1e-5)


def change_at_batch(monkeypatch, batch: int, change) -> None:
    """Call ``change()`` once, when the training stream is first asked for batch ``batch``."""
    read, done = Stream.batch, []

    def batch_then_change(self, index, seed=0, epoch=None, channels_last=False):
        if self.shuffle and epoch == 0 and index[0] >= batch * 8 and not done:
            done.append(change())
        return read(self, index, seed, epoch, channels_last)

    monkeypatch.setattr(Stream, "batch", batch_then_change)


@pytest.mark.parametrize(
    ("framework", "how"), [("lightning", "deleted"), ("keras", "changed")], ids=["lightning", "keras"]
)
def test_a_shard_changed_under_a_run_stops_it_saved_and_resume_reindexes(
    tmp_path, monkeypatch, framework, how
):
    paths = write_corpus(tmp_path / "c", [60, 60])
    contents = [p.read_bytes() for p in paths]

    def change():  # both shards: whichever the epoch reads second is opened after this
        for path in paths:
            if how == "deleted":
                path.unlink()
            else:  # one document rewritten, the file otherwise as it was
                path.write_text(path.read_text().replace(text_of(int(path.stem[-1]) * 60 + 50), "rewritten"))

    change_at_batch(monkeypatch, 3, change)
    sets = [f"trainer.framework={framework}", f"data.path={tmp_path / 'c'}", "data.seq_len=16",
            "data.batch_size=8", "data.shuffle_buffer=4", "data.workers=0"]  # fmt: skip
    code, out = train(tmp_path, "run", *sets)
    assert code == 2, out
    errors = {line for line in out.splitlines() if line.startswith("error:")}  # stderr: in out twice
    what = "cannot be read .No such file or directory.: was it deleted or moved" if how == "deleted" else (
        r"has changed since it was indexed \([\d,]+ bytes then, [\d,]+ now\)"
    )  # fmt: skip
    assert len(errors) == 1 and re.search(rf"part-00\d\.jsonl {what}", *errors) and "Traceback" not in out, (
        out
    )
    # The steps before the batch that could not be read, saved then (no epoch ended: no other save).
    saved = latest_state(tmp_path / "run")
    assert saved is not None and step_of(saved) >= 3, out
    assert f"state is kept (state/{saved.name}, step {step_of(saved)}): zoo resume" in out, out
    summary = tmp_path / "run" / "summary.json"
    assert not summary.exists() or json.loads(summary.read_text())["status"] != "finished"
    if how == "deleted":  # put back (a new modification time): indexed again
        for path, content in zip(paths, contents, strict=True):
            path.write_bytes(content)
    code, out = zoo("resume", str(tmp_path / "run"))
    assert code == 0, out
    assert json.loads(summary.read_text())["status"] == "finished"
