"""One process reading a streamed training epoch, for tests/test_stream_processes.py.

    python tests/stream_reader.py WAY CORPUS OUT

``lightning``: one rank of a torch.distributed job (RANK, WORLD_SIZE, MASTER_ADDR/PORT in the
environment), reading with zoo's DataLoader (2 workers); ``keras``: one worker of a
MultiWorkerMirroredStrategy (TF_CONFIG), reading with zoo's tf.data pipeline (2 parallel
calls); ``alone``: the stream in this process, no framework. Writes the example ids (labels)
of every batch it read, and its peak resident memory, to OUT as JSON. ``blocks``: a character
language model's stream, its first and last ten batches (the whole corpus goes through the
shuffle buffer to reach them); writes the peak resident memory.
"""

from __future__ import annotations

import json
import sys

import numpy as np

from zoo.data import load_dataset
from zoo.recipe import StreamData

BATCH, SEED, EPOCH = 32, 3, 1


def main(framework: str, corpus: str, out: str) -> None:
    if framework == "blocks":
        return blocks(corpus, out)
    cfg = StreamData(
        path=corpus, task="classification", bpe_vocab_size=300, max_length=16, shuffle_buffer=64, workers=2
    )
    split = load_dataset(cfg, "tokens").train
    if framework == "lightning":
        ids = lightning_rank(split)
    elif framework == "keras":
        ids = keras_worker(split)
    else:
        ids = [read_batch(split.x, b)[-1].tolist() for b in range(-(-len(split) // BATCH))]
    with open(out, "w") as handle:
        json.dump({"ids": ids, "examples": len(split)}, handle)


def blocks(corpus: str, out: str) -> None:
    cfg = StreamData(path=corpus, tokenizer="char", seq_len=64, shuffle_buffer=1000, val_fraction=0)
    stream = load_dataset(cfg, "tokens").train.x
    batches = -(-len(stream) // BATCH)
    for batch in [*range(10), *range(batches - 10, batches)]:
        read_batch(stream, batch)
    with open(out, "w") as handle:
        json.dump({"blocks": len(stream), "peak_rss": peak_rss()}, handle)


def peak_rss() -> int:
    """This process's peak resident memory, in bytes. Not ``getrusage``'s ``ru_maxrss``: after
    an exec it is at least the parent's resident memory when it forked (the kernel keeps the
    old address space's peak), which says nothing about this program."""
    with open("/proc/self/status") as status:
        line = next(line for line in status if line.startswith("VmHWM:"))
    return int(line.split()[1]) * 1024


def read_batch(stream, batch: int):
    return stream.batch(np.arange(batch * BATCH, min(batch * BATCH + BATCH, len(stream))), SEED, EPOCH)


def lightning_rank(split) -> list[list[int]]:
    import torch.distributed as dist

    from zoo.lightning.data import loader

    dist.init_process_group("gloo")
    try:
        batches = loader(split, BATCH, SEED, shuffle=True)
        batches.sampler.set_epoch(EPOCH)
        return [batch[-1].tolist() for batch in batches]
    finally:
        dist.destroy_process_group()


def keras_worker(split) -> list[list[int]]:
    from zoo.keras.data import per_worker, train_dataset
    from zoo.keras.multi_worker import multi_worker_strategy

    strategy = multi_worker_strategy()

    def batches(share):
        return train_dataset(split, BATCH, SEED, True, EPOCH + 1, "tokens", start_epoch=EPOCH, share=share)

    stream = iter(per_worker(strategy, split, batches))
    ids = []
    for _ in range(-(-len(split) // BATCH)):
        _, labels = next(stream)
        ids.append(np.concatenate([t.numpy() for t in strategy.experimental_local_results(labels)]).tolist())
    return ids


if __name__ == "__main__":
    main(*sys.argv[1:4])
