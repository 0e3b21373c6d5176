"""data.name stream: one seeded order of examples, read the same by a torch DataLoader (with
workers) and by tf.data (parallel map), from any position; bad records refused or skipped."""

from __future__ import annotations

import json
import logging
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
from stream_corpus import text_of, write_corpus

from zoo.data import DataError, load_dataset
from zoo.data.stream_order import buffered, epoch_ids
from zoo.recipe import StreamData

SAVED = Path(__file__).parent / "data" / "hf-saved"  # written by Hugging Face datasets 5.2.0


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("ZOO_CACHE", str(tmp_path / "cache"))


def labelled(folder: Path, **fields) -> StreamData:
    """Classification whose labels are the examples' ids (see stream_corpus)."""
    settings = {"task": "classification", "bpe_vocab_size": 300, "max_length": 16, "batch_size": 32}
    return StreamData(path=str(folder), **{**settings, **fields})


# ------------------------------------------------------------------------------ the order


def test_the_order_is_a_function_of_seed_epoch_and_record_counts():
    counts = [50, 0, 120, 30]
    first = list(epoch_ids(counts, seed=3, epoch=1, buffer=25))
    assert sorted(first) == list(range(200))
    assert first == list(epoch_ids(counts, 3, 1, 25))
    assert first != list(epoch_ids(counts, 3, 2, 25)) and first != list(epoch_ids(counts, 4, 1, 25))
    # No buffer: whole shards, each in file order, in a seeded shard order.
    shards = list(epoch_ids(counts, 3, 1, 0))
    runs = [shards[i] for i in range(len(shards)) if i == 0 or shards[i] != shards[i - 1] + 1]
    assert sorted(runs) == [0, 50, 170] and shards != sorted(shards)
    assert list(epoch_ids(counts, 3, 1, 25, shuffle=False)) == list(range(200))


def test_the_buffer_delays_a_record_but_never_brings_one_forward_by_more_than_its_size():
    rng = np.random.default_rng(0)
    out = list(buffered(range(5000), 64, rng))
    assert sorted(out) == list(range(5000))
    ahead = [record - position for position, record in enumerate(out)]
    assert max(ahead) <= 64  # only records already read can leave
    assert np.mean(np.abs(ahead)) > 16  # and they are mixed


# ------------------------------------------------------------------------------ both frameworks


def labels_of(stream, batch_size: int, seed: int = 0, epoch: int = 0) -> np.ndarray:
    """The labels (ids) of a whole epoch, read batch by batch from the stream itself."""
    starts = range(0, len(stream), batch_size)
    return np.concatenate(
        [stream.batch(np.arange(i, min(i + batch_size, len(stream))), seed, epoch)[-1] for i in starts]
    )


def torch_epoch(split, batch_size, seed, epoch):
    from zoo.lightning.data import loader

    batches = loader(split, batch_size, seed, shuffle=True)
    batches.sampler.set_epoch(epoch)
    return [tuple(b) for b in batches]


def test_torch_workers_and_tf_parallel_calls_read_the_same_first_thousand_examples(tmp_path):
    from zoo.keras.data import train_dataset

    write_corpus(tmp_path / "c", [400, 250, 500, 150], kinds=("jsonl", "parquet", "csv"))
    data = load_dataset(labelled(tmp_path / "c", workers=2, shuffle_buffer=100), "tokens")
    n = len(data.train)
    assert n == sum(size - 2 * int(size * 0.05) for size in [400, 250, 500, 150])  # 5% validation, 5% test
    torch_side = torch_epoch(data.train, 32, seed=7, epoch=1)
    keras_side = list(train_dataset(data.train, 32, 7, True, 2, "tokens", start_epoch=1).as_numpy_iterator())
    assert len(torch_side) == len(keras_side) == -(-n // 32)
    torch_ids = np.concatenate([b[-1].numpy() for b in torch_side])
    keras_ids = np.concatenate([b[-1] for b in keras_side])
    assert np.array_equal(torch_ids[:1000], keras_ids[:1000])
    assert np.array_equal(torch_ids, keras_ids) and sorted(torch_ids) == sorted(set(torch_ids))
    for (ids, mask, types, _), (inputs, _) in zip(torch_side, keras_side, strict=True):
        assert types is None and set(inputs) == {"ids", "padding_mask"}
        assert np.array_equal(ids.numpy(), inputs["ids"]) and np.array_equal(
            mask.numpy(), inputs["padding_mask"]
        )
    # The order is epoch_ids over the training parts (each file's first 90%), ids mapped to records.
    parts = data.train.x.parts
    starts = np.cumsum([0] + [p.index.records for p in parts])  # the labels count every record
    offsets = np.cumsum([0] + [p.stop - p.start for p in parts])
    expected = []
    for i in epoch_ids([p.stop - p.start for p in parts], seed=7, epoch=1, buffer=100):
        shard = int(np.searchsorted(offsets, i, side="right")) - 1
        expected.append(starts[shard] + i - offsets[shard])
    assert torch_ids.tolist() == expected
    # Another epoch, another order; the tokens of each example are its own text.
    assert not np.array_equal(
        torch_ids, np.concatenate([b[-1].numpy() for b in torch_epoch(data.train, 32, 7, 2)])
    )
    ids, mask = torch_side[0][0][0].numpy(), torch_side[0][1][0].numpy()
    text = data.tokenizer.decode(ids[~mask][1:-1])  # [CLS] text [SEP], cut to max_length
    assert len(text) > 20 and text_of(int(torch_ids[0])).startswith(text)


def test_a_batch_read_alone_is_the_batch_read_in_turn(tmp_path):
    """What a resumed run, a worker or a data-parallel process asks first: any batch of any
    epoch, without the batches before it having been decoded in this process."""
    write_corpus(tmp_path / "c", [300, 200])
    in_turn = load_dataset(labelled(tmp_path / "c", shuffle_buffer=50), "tokens").train.x
    alone = load_dataset(labelled(tmp_path / "c", shuffle_buffer=50), "tokens").train.x
    batches = [
        in_turn.batch(np.arange(i, min(i + 32, len(in_turn))), 5, 2)[-1] for i in range(0, len(in_turn), 32)
    ]
    for b in (7, 3, 12, 0):
        positions = np.arange(b * 32, min(b * 32 + 32, len(alone)))
        assert np.array_equal(alone.batch(positions, 5, 2)[-1], batches[b])
    # A share of a batch (a data-parallel process's) is that part of the batch.
    assert np.array_equal(alone.batch(np.arange(80, 96), 5, 2)[-1], batches[2][16:])
    # Indexed as an array is (code written for in-memory splits): the first epoch's order.
    first = labels_of(in_turn, 32)
    assert alone.take([40, 3, 41, 3])[-1].tolist() == [first[40], first[3], first[41], first[3]]
    assert np.array_equal(alone[5:7], alone.batch(np.arange(5, 7))[0])


def test_validation_and_test_are_each_files_last_records_in_stored_order(tmp_path):
    write_corpus(tmp_path / "c", [100, 60])
    data = load_dataset(labelled(tmp_path / "c", val_fraction=0.1, test_fraction=0.2), "tokens")
    assert (len(data.train), len(data.val), len(data.test)) == (112, 16, 32)
    assert labels_of(data.val.x, 10).tolist() == [*range(70, 80), *range(142, 148)]
    assert labels_of(data.test.x, 10).tolist() == [*range(80, 100), *range(148, 160)]


def test_a_save_to_disk_folder_gives_its_splits_and_class_names():
    data = load_dataset(StreamData(path=str(SAVED), task="classification", bpe_vocab_size=300), "tokens")
    assert (len(data.train), len(data.val), len(data.test)) == (40, 8, 8)
    assert data.classes == ("compound", "expression", "simple") and data.info["num_classes"] == 3
    ids, _, _, labels = data.test.x.batch(np.arange(8))
    assert labels.tolist() == [i % 3 for i in range(48, 56)]
    assert (
        data.tokenizer.decode(ids[0][ids[0] != data.tokenizer.padding_id])
        == "[CLS]sample 48 about python[SEP]"
    )


# ------------------------------------------------------------------------------ language modeling


def test_language_model_blocks_pack_the_epochs_documents_in_order(tmp_path):
    write_corpus(tmp_path / "c", [40, 30], kinds=("jsonl", "parquet"))
    cfg = StreamData(path=str(tmp_path / "c"), seq_len=16, shuffle_buffer=8, bpe_vocab_size=300)
    data = load_dataset(cfg, "tokens")
    stream, tokenizer = data.train.x, data.tokenizer
    eot = tokenizer.eos_id
    parts = stream.parts
    records = [p.index.records for p in parts]
    offsets = np.cumsum([0] + [p.stop - p.start for p in parts])
    documents = []
    for i in epoch_ids([p.stop - p.start for p in parts], seed=1, epoch=0, buffer=8):
        shard = int(np.searchsorted(offsets, i, side="right")) - 1
        documents += [*tokenizer.encode(text_of(sum(records[:shard]) + i - offsets[shard])), eot]
    blocks = (len(documents) - 1) // 16
    assert len(stream) == blocks
    x, y = stream.batch(np.arange(blocks), seed=1, epoch=0)
    assert x.shape == (blocks, 16) and np.array_equal(x.reshape(-1), documents[: blocks * 16])
    assert np.array_equal(y.reshape(-1), documents[1 : blocks * 16 + 1])
    later = load_dataset(cfg, "tokens").train.x.batch(np.arange(5, 9), seed=1, epoch=0)
    assert np.array_equal(later[0], x[5:9]) and np.array_equal(later[1], y[5:9])


@pytest.mark.parametrize("tokenizer", ["bpe", "char"])
def test_the_index_sizes_documents_a_batch_at_a_time_as_decoding_tokenizes_them_one_by_one(
    tmp_path, monkeypatch, tokenizer
):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from zoo.data import stream_index
    from zoo.data.stream_tasks import document_ids

    # Batches of 7 records or 200 characters; a Parquet row group with a null text is checked
    # row by row, the others whole; bad JSONL lines are left out mid-batch.
    monkeypatch.setattr(stream_index, "BATCH_ROWS", 7)
    monkeypatch.setattr(stream_index, "BATCH_CHARACTERS", 200)
    write_corpus(tmp_path / "c", [30], kinds=("jsonl",))
    lines = (tmp_path / "c" / "part-000.jsonl").read_text().splitlines(keepends=True)
    lines[3], lines[11] = "not json\n", '{"text": 5}\n'
    lines[20] = json.dumps({"text": "a lone surrogate \ud800"}) + "\n"  # JSON spells it; no text holds it
    lines[21] = json.dumps({"text": "çà et là, 😀"}) + "\n"
    (tmp_path / "c" / "part-000.jsonl").write_text("".join(lines))
    texts = [text_of(n) for n in range(30, 75)]
    texts[17] = None
    pq.write_table(pa.table({"text": texts}), tmp_path / "c" / "part-001.parquet", row_group_size=15)
    cfg = StreamData(path=str(tmp_path / "c"), seq_len=8, tokenizer=tokenizer, bpe_vocab_size=300,
                     on_bad_record="skip", val_fraction=0)  # fmt: skip
    data = load_dataset(cfg, "tokens")
    kept = {
        "jsonl": [json.loads(line)["text"] for i, line in enumerate(lines) if i not in (3, 11, 20)],
        "parquet": [t for t in texts if t is not None],
    }
    for part in data.train.x.parts:
        kind = part.index.shard.kind
        expected = [len(document_ids(data.tokenizer, text, kind)) for text in kept[kind]]
        assert part.index.records == len(expected)
        assert list(part.index.sizes(0, part.index.records)) == expected
    if tokenizer == "char":
        assert set(data.tokenizer.vocab) == set("".join(kept["jsonl"] + kept["parquet"]) + "\n\n")
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "one.jsonl").write_text(lines[21] + lines[20])
    alone = cfg.model_copy(update={"path": [str(tmp_path / "d")], "on_bad_record": "error"})
    with pytest.raises(DataError, match=r"one\.jsonl, line 2: 'text' holds '\\ud800', a lone surrogate"):
        load_dataset(alone, "tokens")


def test_reading_a_few_positions_of_an_epoch_holds_none_of_the_others(tmp_path):
    """An epoch of a large corpus has tens of millions of positions: the memory estimate's
    first batch and a stored-order sampler's batches are read without an array of them all
    (here 10**12 positions, 8 TB of int64: made, it would fail)."""
    import dataclasses

    from zoo.data import epoch_batches
    from zoo.lightning.data import BatchOrder

    write_corpus(tmp_path / "c", [40])
    stream = load_dataset(
        StreamData(path=str(tmp_path / "c"), seq_len=8, bpe_vocab_size=300), "tokens"
    ).train.x
    huge = dataclasses.replace(stream, length=10**12)
    first = stream[:3]
    assert np.array_equal(huge[:3], first) and np.array_equal(huge[[2, 0]], first[[2, 0]])
    assert np.array_equal(huge[-(10**12)], first[0]) and np.array_equal(huge[np.int64(1)], first[1])
    with pytest.raises(IndexError, match=f"index {10**12} is out of bounds for a stream of {10**12}"):
        huge[[0, 10**12]]
    order = BatchOrder(10**12, 16, seed=0, shuffle=False, keyed=True)
    order.skip = 5  # a resumed epoch
    epoch, batch = next(iter(order))
    assert epoch == 0 and np.array_equal(batch, np.arange(80, 96))
    stored = [b.tolist() for b in epoch_batches(50, 16, seed=0, epoch=0, shuffle=False)]
    assert [b.tolist() for b in BatchOrder(50, 16, seed=0, shuffle=False)] == stored


def test_masked_language_model_batches_are_the_same_in_both_frameworks(tmp_path):
    from zoo.data import IGNORE_INDEX
    from zoo.keras.data import eval_dataset, train_dataset
    from zoo.lightning.data import loader

    write_corpus(tmp_path / "c", [60, 40])
    cfg = StreamData(
        path=str(tmp_path / "c"), task="masked_language_modeling", seq_len=12, bpe_vocab_size=300, workers=2
    )
    data = load_dataset(cfg, "tokens")
    torch_side = torch_epoch(data.train, 8, seed=2, epoch=0)
    keras_side = list(train_dataset(data.train, 8, 2, True, 1, "tokens").as_numpy_iterator())
    for (inputs, labels), (tf_inputs, tf_labels) in zip(torch_side, keras_side, strict=True):
        assert np.array_equal(inputs.numpy(), tf_inputs) and np.array_equal(labels.numpy(), tf_labels)
    labels = np.concatenate([b[1].numpy() for b in torch_side])
    assert 0.05 < np.mean(labels != IGNORE_INDEX) < 0.3
    test_torch = [tuple(b) for b in loader(data.test, 4)]
    test_keras = list(eval_dataset(data.test, 4, "tokens").as_numpy_iterator())
    assert all(np.array_equal(a[1].numpy(), b[1]) for a, b in zip(test_torch, test_keras, strict=True))


# ------------------------------------------------------------------------------ images


def test_images_from_paths_and_from_bytes_decode_as_an_image_folder_does(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from zoo.data.digits import write_digits_folder
    from zoo.data.image_files import ImageFiles
    from zoo.data.image_folder import pixels_for
    from zoo.keras.data import train_dataset

    folder = write_digits_folder(tmp_path / "digits", size=16, per_class=4)
    files = sorted(folder.rglob("*.png"))
    rows = [{"image": str(f.relative_to(folder)), "label": int(f.parent.name)} for f in files]
    (folder / "index.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    packed = [
        {"image": {"bytes": f.read_bytes(), "path": None}, "label": r["label"]}
        for f, r in zip(files, rows, strict=True)
    ]
    pq.write_table(pa.Table.from_pylist(packed), tmp_path / "digits.parquet")
    common = {
        "task": "classification",
        "image_column": "image",
        "image_size": 16,
        "val_fraction": 0,
        "test_fraction": 0.25,
    }
    by_path = load_dataset(StreamData(path=str(folder / "index.jsonl"), **common), "image")
    by_bytes = load_dataset(StreamData(path=str(tmp_path / "digits.parquet"), **common), "image")
    assert by_path.info == {"in_channels": 3, "image_size": 16, "num_classes": 10}
    n = len(by_path.test)
    x, y = by_path.test.x.batch(np.arange(n))
    assert np.array_equal(by_bytes.test.x.batch(np.arange(n))[0], x)
    # The test split is the last rows, stored order: what an image folder's files decode to.
    tested = [os.fsencode(r["image"]) for r in rows[len(rows) - n :]]
    files = ImageFiles(
        str(folder), np.array(tested, dtype=bytes), pixels_for(StreamData(path=str(folder), **common))
    )
    assert np.array_equal(files.batch(np.arange(n)), x) and y.tolist() == [r["label"] for r in rows[-n:]]
    augmented = StreamData(path=str(folder / "index.jsonl"), **common, augment=True, workers=2)
    train = load_dataset(augmented, "image").train
    torch_side = torch_epoch(train, 8, seed=4, epoch=1)
    keras_side = list(train_dataset(train, 8, 4, True, 2, "image", start_epoch=1).as_numpy_iterator())
    for (images, labels), (tf_images, tf_labels) in zip(torch_side, keras_side, strict=True):
        assert np.array_equal(images.numpy().transpose(0, 2, 3, 1), tf_images)
        assert np.array_equal(labels.numpy(), tf_labels)


# ------------------------------------------------------------------------------ bad records


def test_a_line_that_is_not_json_is_refused_naming_file_and_line_or_skipped_and_counted(tmp_path, caplog):
    write_corpus(tmp_path / "c", [30, 30])
    shard = tmp_path / "c" / "part-001.jsonl"
    lines = shard.read_text().splitlines(keepends=True)
    lines[4] = '{"text": "cut sh\n'
    lines[9] = '{"label": 3}\n'
    shard.write_text("".join(lines))
    with pytest.raises(DataError, match=r"part-001\.jsonl, line 5: is not JSON .*data\.on_bad_record: skip"):
        load_dataset(labelled(tmp_path / "c"), "tokens")
    with caplog.at_level(logging.WARNING, logger="zoo"):
        data = load_dataset(labelled(tmp_path / "c", on_bad_record="skip", val_fraction=0), "tokens")
    assert "left out 2 bad record(s)" in caplog.text and "line 10: no 'text' field" in caplog.text
    labels = labels_of(data.train.x, 8)
    assert 34 not in labels and 39 not in labels and len(data.train) + len(data.test) == 58
    # The same files again: the cached index says the same, without reading them.
    with pytest.raises(DataError, match=r"line 5: is not JSON"):
        load_dataset(labelled(tmp_path / "c"), "tokens")


def test_a_truncated_parquet_file_is_refused_by_name_or_left_out(tmp_path, caplog):
    write_corpus(tmp_path / "c", [40, 40], kinds=("jsonl", "parquet"))
    cut = tmp_path / "c" / "part-001.parquet"
    cut.write_bytes(cut.read_bytes()[:-100])
    with pytest.raises(DataError, match=r"part-001\.parquet: not a readable Parquet file .* cut short"):
        load_dataset(labelled(tmp_path / "c"), "tokens")
    with caplog.at_level(logging.WARNING, logger="zoo"):
        data = load_dataset(labelled(tmp_path / "c", on_bad_record="skip"), "tokens")
    assert "left out 1 bad record(s) or unreadable file(s)" in caplog.text
    assert len(data.train) + len(data.val) + len(data.test) == 40


def test_an_unreadable_image_is_refused_naming_its_row_or_skipped(tmp_path, caplog):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from zoo.data.digits import write_digits_folder

    folder = write_digits_folder(tmp_path / "digits", size=8, per_class=2)
    files = sorted(folder.rglob("*.png"))
    rows = [{"image": {"bytes": f.read_bytes(), "path": None}, "label": int(f.parent.name)} for f in files]
    rows[7]["image"]["bytes"] = b"not an image"
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "images.parquet")
    cfg = {"path": str(tmp_path / "images.parquet"), "task": "classification", "image_column": "image",
           "image_size": 8, "val_fraction": 0, "test_fraction": 0.2}  # fmt: skip
    with pytest.raises(DataError, match=r"images\.parquet, row 7: not a readable image"):
        load_dataset(StreamData(**cfg), "image")
    with caplog.at_level(logging.WARNING, logger="zoo"):
        data = load_dataset(StreamData(**cfg, on_bad_record="skip"), "image")
    assert "row 7: not a readable image" in caplog.text and len(data.train) + len(data.test) == 19


def test_recipe_mistakes_are_named():
    with pytest.raises(ValueError, match=r"data.path 'nowhere/\*.jsonl' is neither a file"):
        StreamData(path="nowhere/*.jsonl")
    with pytest.raises(ValueError, match=r"data.seq_len does not apply to data.task 'classification'"):
        StreamData(path=str(SAVED), task="classification", seq_len=8)
    with pytest.raises(ValueError, match=r"data.image_size does not apply .* images"):
        StreamData(path=str(SAVED), task="classification", image_size=32)


def test_text_for_an_image_model_is_refused():
    with pytest.raises(DataError, match="gives token ids, but the model reads images"):
        load_dataset(StreamData(path=str(SAVED), task="classification"), "image")


def test_the_index_is_read_again_only_when_a_file_changes(tmp_path, monkeypatch):
    from zoo.data import stream_index

    write_corpus(tmp_path / "c", [40, 40])
    passes, original = [], stream_index._index_shard
    monkeypatch.setattr(stream_index, "_index_shard", lambda *a: passes.append(a[1].path) or original(*a))
    first = load_dataset(labelled(tmp_path / "c"), "tokens")
    again = load_dataset(labelled(tmp_path / "c"), "tokens")
    assert len(passes) == 2 and len(again.train) == len(first.train)
    with open(tmp_path / "c" / "part-001.jsonl", "a") as shard:
        shard.write(json.dumps({"text": text_of(80), "label": 80}) + "\n")
    grown = load_dataset(labelled(tmp_path / "c"), "tokens")
    assert len(passes) == 4 and len(grown.train) + len(grown.val) + len(grown.test) == 81


def test_a_cached_index_that_is_not_json_is_refused_naming_the_folder_to_delete(tmp_path):
    write_corpus(tmp_path / "c", [40])
    load_dataset(labelled(tmp_path / "c"), "tokens")
    (cached,) = (tmp_path / "cache" / "streams").glob("*/index.json")
    cached.write_text('{"shards": [')  # as a disk that filled up mid-write would leave it
    with pytest.raises(DataError, match=rf"{cached} is not JSON .*; delete {cached.parent} to index"):
        load_dataset(labelled(tmp_path / "c"), "tokens")
    shutil.rmtree(cached.parent)
    assert len(load_dataset(labelled(tmp_path / "c"), "tokens").train) == 40 - 2 - 2


def test_text_files_are_a_record_a_line_their_newlines_kept(tmp_path):
    folder = tmp_path / "texts"
    folder.mkdir()
    lines = [text_of(n) + "\n" for n in range(120)]
    (folder / "a.txt").write_text("".join(lines[:70]))
    (folder / "b.txt").write_text("".join(lines[70:]))
    cfg = StreamData(path=str(folder), tokenizer="char", seq_len=32, shuffle=False, val_fraction=0)
    data = load_dataset(cfg, "tokens")
    stream = data.train.x
    kept = lines[: 70 - int(70 * 0.05)] + lines[70 : 120 - int(50 * 0.05)]
    text = "".join(kept)  # no separator: each line's own newline ends it
    assert len(stream) == (len(text) - 1) // 32
    x, y = stream.batch(np.arange(len(stream)))
    assert data.tokenizer.decode(x.reshape(-1)) == text[: len(stream) * 32]
    assert np.array_equal(y[:, -1], data.tokenizer.encode_array(text[32 : len(stream) * 32 + 1 : 32]))


# ------------------------------------------------------------------------------ changed files


def test_a_shard_changed_or_deleted_since_it_was_indexed_is_named_where_it_is_read(tmp_path):
    from zoo.data.stream import UnreadableBatch

    paths = write_corpus(tmp_path / "c", [40, 40])
    cfg = StreamData(path=str(tmp_path / "c"), tokenizer="char", seq_len=8, val_fraction=0)
    stream = load_dataset(cfg, "tokens").train.x
    size = paths[1].stat().st_size
    with open(paths[1], "a") as shard:  # grown
        shard.write(json.dumps({"text": text_of(80)}) + "\n")
    grown = paths[1].stat().st_size
    changed = r"\.jsonl has changed since it was indexed"
    with pytest.raises(UnreadableBatch, match=rf"part-001{changed} \({size:,} bytes then, {grown:,} now\)"):
        stream.batch(np.arange(len(stream)))
    os.utime(paths[0], ns=(0, 10**18))  # the same size, written to since
    with pytest.raises(UnreadableBatch, match=rf"part-000{changed} \(written to since\)"):
        stream.batch(np.arange(4))
    paths[0].unlink()
    gone = r"part-000\.jsonl cannot be read \(No such file or directory\): was it deleted or moved"
    with pytest.raises(UnreadableBatch, match=gone):
        stream.batch(np.arange(4))
    # A new load indexes the files as they are now and reads them.
    paths[0].write_text("".join(json.dumps({"text": text_of(n)}) + "\n" for n in range(40)))
    again = load_dataset(cfg, "tokens").train.x
    assert len(again) > len(stream) and len(again.batch(np.arange(len(again)))[0]) == len(again)


def test_a_shard_written_to_while_it_is_indexed_is_named(tmp_path, monkeypatch):
    from zoo.data import stream_index

    paths = write_corpus(tmp_path / "c", [40, 40])
    index_shard = stream_index._index_shard

    def then_written(i, shard, *args):
        found = index_shard(i, shard, *args)
        with open(paths[0], "a") as handle:
            handle.write(json.dumps({"text": "late"}) + "\n")
        return found

    monkeypatch.setattr(stream_index, "_index_shard", then_written)
    cfg = StreamData(path=str(tmp_path / "c"), tokenizer="char", seq_len=8)
    with pytest.raises(
        DataError, match=r"part-000\.jsonl has changed while it was indexed \([\d,]+ bytes then"
    ):
        load_dataset(cfg, "tokens")


def test_a_shard_cut_short_unseen_or_an_index_deleted_is_named_not_a_zip_error(tmp_path, monkeypatch):
    from zoo.data import stream_index
    from zoo.data.stream import UnreadableBatch

    (path,) = write_corpus(tmp_path / "c", [40])
    cfg = StreamData(path=str(tmp_path / "c"), tokenizer="char", seq_len=8, val_fraction=0, test_fraction=0.1)
    stream = load_dataset(cfg, "tokens").train.x
    shutil.rmtree(tmp_path / "cache")  # the index, deleted under a run
    with pytest.raises(
        UnreadableBatch, match=r"the index of .*part-000\.jsonl cannot be read \(No such file"
    ):
        stream.batch(np.arange(len(stream)))
    stream = load_dataset(cfg, "tokens").train.x
    monkeypatch.setattr(stream_index, "check_unchanged", lambda *a, **k: None)  # a change no stat sees
    path.write_text("".join(path.read_text().splitlines(keepends=True)[:20]))
    with pytest.raises(UnreadableBatch, match=r"part-000\.jsonl ended after 20 records, its index says 40"):
        stream.batch(np.arange(len(stream)))


def test_a_csv_document_longer_than_the_csv_modules_default_field_limit_is_a_record(tmp_path):
    long = "word " * 40_000  # 200,000 characters: the csv module refuses fields over 131,072 by default
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "long.csv").write_text("text\n" + f'"{long}"\n' + "short\n" * 20)
    data = load_dataset(StreamData(path=str(tmp_path / "c"), tokenizer="char", seq_len=4), "tokens")
    assert [p.index.records for p in data.train.x.parts] == [21] and len(data.train) > 50_000
