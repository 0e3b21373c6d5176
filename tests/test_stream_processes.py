"""data.name stream across processes: two data-parallel processes in each framework read
disjoint shares whose union is the epoch; a run killed mid-epoch resumes to the very weights of
an uninterrupted one; resident memory does not grow with the corpus."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import warm_zoo
from safetensors.numpy import load_file
from stream_corpus import write_corpus

from zoo.checkpoint.state import states
from zoo.runs.launch import free_ports

pytestmark = pytest.mark.slow
READER = Path(__file__).parent / "stream_reader.py"


def environment(tmp_path, **extra) -> dict[str, str]:
    return {**os.environ, "ZOO_CACHE": str(tmp_path / "cache"), "TF_CPP_MIN_LOG_LEVEL": "2",
            "ZOO_DDP_TIMEOUT_S": "60", **extra}  # fmt: skip


def read(tmp_path, framework, corpus, name, env=None, *args) -> subprocess.Popen:
    command = [sys.executable, str(READER), framework, str(corpus), str(tmp_path / f"{name}.json"), *args]
    # Cold: each data-parallel reader's environment (RANK, TF_CONFIG) is read at import, so a
    # warm server would be started for each one.
    return subprocess.Popen(command, env=env or environment(tmp_path), stderr=subprocess.PIPE, text=True)


def finished(processes: list[subprocess.Popen]) -> None:
    try:
        for process in processes:
            _, err = process.communicate(timeout=300)
            assert process.returncode == 0, err[-3000:]
    finally:
        for process in processes:  # never leave a reader behind, whatever happened
            if process.poll() is None:
                process.kill()
                process.wait()


@pytest.mark.parametrize("framework", ["lightning", "keras"])
def test_two_data_parallel_processes_read_disjoint_shares_whose_union_is_the_epoch(tmp_path, framework):
    corpus = tmp_path / "corpus"
    write_corpus(corpus, [300, 200, 250], kinds=("jsonl", "parquet"))
    finished([read(tmp_path, "alone", corpus, "alone")])
    alone = json.loads((tmp_path / "alone.json").read_text())["ids"]
    if framework == "lightning":
        (port,) = free_ports(1)
        common = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "WORLD_SIZE": "2"}
        envs = [environment(tmp_path, **common, RANK=str(r), LOCAL_RANK=str(r)) for r in range(2)]
    else:
        cluster = {"worker": [f"127.0.0.1:{p}" for p in free_ports(2)]}
        tasks = [{"cluster": cluster, "task": {"type": "worker", "index": r}} for r in range(2)]
        envs = [environment(tmp_path, TF_CONFIG=json.dumps(task)) for task in tasks]
    finished([read(tmp_path, framework, corpus, f"rank{r}", envs[r]) for r in range(2)])
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text())["ids"] for r in range(2)]
    assert len(ranks[0]) == len(ranks[1]) == len(alone)
    for batch, first, second in zip(alone, *ranks, strict=True):
        # Each process reads its contiguous half of every global batch, and nothing else.
        assert [first, second] == [part.tolist() for part in np.array_split(batch, 2)]
    seen = [i for rank in ranks for batch in rank for i in batch]
    assert len(seen) == len(set(seen)) == sum(map(len, alone))


RECIPE = """
model: {architecture: transformer-tiny, dropout: 0.2}
data: {name: stream, path: %s, seq_len: 16, batch_size: 32, bpe_vocab_size: 300, shuffle_buffer: 40,
       workers: 2}
optimizer: {name: adamw, lr: 0.003}
trainer: {max_epochs: 3, progress_bar: false, seed: 5, num_threads: 1, deterministic: true}
export: {state_every_n_steps: 5, keep_states: 2}
"""


def train(tmp_path, recipe, framework, name, *verb) -> list[str]:
    sets = [f"export.dir={tmp_path}", f"export.run_name={name}"]
    return [sys.executable, "-m", "zoo.cli", *(verb or ("train", str(recipe))), "--framework", framework,
            *(a for s in sets for a in ("--set", s))]  # fmt: skip


@pytest.mark.parametrize("framework", ["lightning", "keras"])
def test_sigkill_mid_epoch_then_resume_continues_the_stream_to_identical_weights(tmp_path, framework):
    write_corpus(tmp_path / "corpus", [120, 90, 100], kinds=("jsonl", "parquet"))
    recipe = tmp_path / "lm.yaml"
    recipe.write_text(RECIPE % (tmp_path / "corpus"))
    env = environment(tmp_path)
    whole = warm_zoo.run(train(tmp_path, recipe, framework, "whole"), env=env, capture_output=True, text=True)
    assert whole.returncode == 0, whole.stderr[-3000:]
    steps = int((tmp_path / "whole" / "metrics.csv").read_text().splitlines()[1].split(",")[1])
    kill_at = (steps + steps // 2) // 5 * 5  # a state saved in the middle of the second epoch
    assert steps < kill_at < 2 * steps

    victim = warm_zoo.Popen(train(tmp_path, recipe, framework, "killed"), env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    run_dir, deadline = tmp_path / "killed", time.monotonic() + 300
    try:
        while not any(p.name.startswith(f"step-{kill_at:09d}") for p in states(run_dir)):
            assert victim.poll() is None, "the run ended before it could be killed"
            assert time.monotonic() < deadline
            time.sleep(0.02)
    finally:
        victim.send_signal(signal.SIGKILL)
        victim.wait()
    assert not (run_dir / "model.safetensors").exists()
    resumed = warm_zoo.run([sys.executable, "-m", "zoo.cli", "resume", str(run_dir)], env=env,
                             capture_output=True, text=True)  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "resuming" in resumed.stderr
    expected, got = (
        load_file(tmp_path / "whole" / "model.safetensors"),
        load_file(run_dir / "model.safetensors"),
    )
    assert expected.keys() == got.keys()
    assert all(np.array_equal(expected[k], got[k]) for k in expected), "resumed weights differ"
    # Every epoch's row means all of its batches, the interrupted one's too (only its seconds differ).
    rows = [row.rsplit(",", 1)[0] for row in (run_dir / "metrics.csv").read_text().splitlines()]
    assert rows == [
        row.rsplit(",", 1)[0] for row in (tmp_path / "whole" / "metrics.csv").read_text().splitlines()
    ]


def test_resident_memory_does_not_grow_with_the_corpus(tmp_path):
    """A character language model's stream over a corpus of 10 MB and of 40 MB (JSONL and
    Parquet): indexed, then read at its first and last batches, so every record passes the
    shuffle buffer. Were the corpus kept, the larger one's peak would be higher by 30 MB or more
    (measured: 1 to 3 MB, and 3.5 MB at 80 MB: Python's own structures per file). Arrow's own
    allocator (jemalloc) keeps freed memory back by amounts that vary run to run by ~10 MB
    whatever the corpus; the system allocator does not, so the difference left is zoo's."""
    peaks, sizes = [], []
    for scale in (1, 4):
        folder = tmp_path / f"corpus-{scale}"
        write_corpus(folder, [50_000] * 4 * scale, kinds=("jsonl", "parquet"))
        sizes.append(sum(f.stat().st_size for f in folder.iterdir()))
        env = environment(tmp_path, ARROW_DEFAULT_MEMORY_POOL="system")
        finished([read(tmp_path, "blocks", folder, f"peak-{scale}", env)])
        peaks.append(json.loads((tmp_path / f"peak-{scale}.json").read_text())["peak_rss"])
    assert sizes[1] > 30e6 + sizes[0]
    assert peaks[1] - peaks[0] < 0.2 * (sizes[1] - sizes[0]), (peaks, sizes)


@pytest.mark.parametrize("framework", ["lightning", "keras"])
def test_an_image_that_opens_but_cannot_be_decoded_stops_training_in_one_line(tmp_path, framework):
    """Its header passes the index pass's check; its pixels are cut short. A DataLoader worker or
    a tf.data call meets it: the run stops, exit 2, the file and row named, no traceback."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from zoo.data.digits import write_digits_folder

    folder = write_digits_folder(tmp_path / "digits", size=8, per_class=3)
    files = sorted(folder.rglob("*.png"))
    rows = [{"image": {"bytes": f.read_bytes(), "path": None}, "label": int(f.parent.name)} for f in files]
    rows[4]["image"]["bytes"] = rows[4]["image"]["bytes"][:60]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "images.parquet")
    recipe = tmp_path / "images.yaml"
    recipe.write_text(
        "model: {architecture: convnet-tiny}\n"
        f"data: {{name: stream, path: {tmp_path / 'images.parquet'}, task: classification,\n"
        "       image_column: image, image_size: 8, batch_size: 8, workers: 2, val_fraction: 0,\n"
        "       test_fraction: 0.2}\n"
        "trainer: {max_epochs: 1, progress_bar: false}\n"
    )
    done = warm_zoo.run(train(tmp_path, recipe, framework, "broken"), env=environment(tmp_path),
                          capture_output=True, text=True)  # fmt: skip
    assert done.returncode == 2, done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("error: ") and "images.parquet, row 4: cannot be decoded as an image" in last
