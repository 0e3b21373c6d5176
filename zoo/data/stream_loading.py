"""A stream recipe's dataset: its files found (a ``save_to_disk`` DatasetDict gives its own
splits), indexed once (or read from the cached index), carved into train, validation and test
parts, and handed to the task's reader: the three splits of :class:`~zoo.data.stream.Stream`
that ``zoo.data.load_dataset`` returns for ``data.name: stream``."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

from zoo.data.dataset import Dataset
from zoo.data.shards import SAVED_SPLITS, Shard, class_names, find_shards, parse, raw_rows, saved_splits
from zoo.data.stream import Part, Stream, StreamLabels, StreamSplit
from zoo.data.stream_index import ShardIndex, corpus_index
from zoo.data.stream_tasks import (
    ImageExamples,
    Labels,
    TextExamples,
    TokenExamples,
    label_lookup,
    lone_surrogate,
)
from zoo.data.text import data_tokenizer, mlm_masking
from zoo.errors import DataError
from zoo.registry import families_reading
from zoo.tokenizer import CharTokenizer, Tokenizer

LM_TASKS = ("language_modeling", "masked_language_modeling")
SPLIT_NAMES = {"validation": ("validation", "valid", "val", "dev"), "test": ("test",)}
BPE_SAMPLE = 1 << 24  # characters of training text a 'bpe' tokenizer learns from (the files' start)


def load_stream(cfg, input_kind: str, tokenizer: Tokenizer | None = None) -> Dataset:
    """Index the recipe's files (or read their cached index) and make its three splits;
    ``tokenizer`` (a checkpoint's) replaces the recipe's ``data.tokenizer``."""
    entries = split_entries(cfg)
    shards = {name: find_shards(found, f"data.{name}") for name, found in entries.items()}
    examples = task_examples(cfg, input_kind, tokenizer, shards["path"])
    unique = list(dict.fromkeys(s for found in shards.values() for s in found))
    sized = cfg.task in LM_TASKS
    index = corpus_index(unique, examples, cfg.on_bad_record, sized)
    by_shard = dict(zip(unique, index.shards, strict=True))
    parts = split_parts(cfg, {name: [by_shard[s] for s in found] for name, found in shards.items()})
    found = index.found
    if sized:
        if examples.tokenizer is None:
            examples.tokenizer = CharTokenizer(found["characters"])
        if cfg.task == "masked_language_modeling":
            examples.masking = mlm_masking(examples.tokenizer, cfg.mlm_probability)
    else:
        examples.lookup = label_lookup(found)
    workers = cfg.workers if cfg.workers is not None else min(8, os.cpu_count() or 1)
    splits = {}
    for name in ("train", "val", "test"):
        own = eval_examples(examples) if name != "train" else examples
        length = sum(p.size for p in parts[name])
        length = examples.blocks(length) if sized else length
        stream = Stream(
            parts[name], own, length, cfg.shuffle_buffer, name == "train" and cfg.shuffle, workers
        )
        splits[name] = StreamSplit(stream, StreamLabels(stream))
    for name in ("train", "test"):
        if not len(splits[name]):
            raise DataError(f"data: the {name} split has no examples; {EMPTY[name]}")
    tokenizer = getattr(examples, "tokenizer", None)
    return Dataset(
        splits["train"], splits["val"], splits["test"], cfg.task, dataset_info(cfg, examples, found),
        vocab=getattr(tokenizer, "vocab", None), classes=classes_of(cfg, found, shards["path"]),
        tokenizer=tokenizer,
    )  # fmt: skip


EMPTY = {
    "train": "give more data, or lower data.val_fraction / data.test_fraction",
    "test": "give test files (data.test) or raise data.test_fraction",
}


def split_entries(cfg) -> dict[str, list[str]]:
    """The files of each split the recipe names; a DatasetDict folder gives its own splits."""
    entries = {"path": list(cfg.path)}
    if len(cfg.path) == 1 and (Path(cfg.path[0]) / SAVED_SPLITS).is_file():
        saved = saved_splits(Path(cfg.path[0]))
        if "train" not in saved:
            raise DataError(
                f"data.path {cfg.path[0]!r}: a DatasetDict without a 'train' split ({sorted(saved)})"
            )
        entries["path"] = [str(saved["train"])]
        for name, aliases in SPLIT_NAMES.items():
            given = [a for a in aliases if a in saved]
            if getattr(cfg, name) is None and given:
                entries[name] = [str(saved[given[0]])]
    for name in SPLIT_NAMES:
        if getattr(cfg, name) is not None:
            entries[name] = list(getattr(cfg, name))
    return entries


def split_parts(cfg, indexed: dict[str, list[ShardIndex]]) -> dict[str, tuple[Part, ...]]:
    """Each split's parts: its own files whole, or its share at the end of every training file
    (train, then validation, then test: no record in two splits)."""
    carve = {
        name: getattr(cfg, f"{'val' if name == 'validation' else name}_fraction") for name in SPLIT_NAMES
    }
    parts: dict[str, list[Part]] = {"train": [], "val": [], "test": []}
    for shard in indexed["path"]:
        n = shard.records
        n_test = int(n * carve["test"]) if "test" not in indexed else 0
        n_val = int(n * carve["validation"]) if "validation" not in indexed else 0
        parts["train"].append(Part(shard, 0, n - n_val - n_test))
        parts["val"].append(Part(shard, n - n_val - n_test, n - n_test))
        parts["test"].append(Part(shard, n - n_test, n))
    for name, key in (("validation", "val"), ("test", "test")):
        if name in indexed:
            parts[key] = [Part(shard, 0, shard.records) for shard in indexed[name]]
    return {name: tuple(found) for name, found in parts.items()}


def task_examples(cfg, input_kind: str, tokenizer: Tokenizer | None, train: list[Shard]):
    """The task's reader, with the tokenizer it needs before the index pass (None: characters,
    learnt by the pass)."""
    from zoo.data.image_folder import pixels_for

    if cfg.task == "classification" and cfg.image_column is not None:
        if input_kind != "image":
            raise DataError(
                f"data.image_column gives images, but the model reads {input_kind}s; use an image "
                f"architecture ({families_reading('image')})"
            )
        decode = cfg.check_images == "decode"
        labels = Labels(cfg.label_column)
        return ImageExamples(cfg.image_column, cfg.label_column, pixels_for(cfg), decode, labels=labels)
    if input_kind == "image":
        raise DataError(
            f"data task {cfg.task!r} of text gives token ids, but the model reads images; set "
            "data.image_column for images, or use a family that reads tokens "
            f"({families_reading('tokens', 'sequence')})"
        )
    if tokenizer is None and cfg.tokenizer != "char":
        tokenizer = data_tokenizer(cfg, sample_texts(cfg, train), None, extend=False)
    if cfg.task == "classification":
        if tokenizer is None:
            raise DataError("streamed text classification needs data.tokenizer 'bpe' or a tokenizer path")
        text = TextExamples(cfg.text_column, cfg.text_pair_column, cfg.label_column, cfg.max_length)
        text.tokenizer, text.labels = tokenizer, Labels(cfg.label_column)
        return text
    return TokenExamples(cfg.text_column, cfg.seq_len, tokenizer)


def sample_texts(cfg, shards: list[Shard]) -> list[str]:
    """The first :data:`BPE_SAMPLE` characters of training text, in stored order (what a 'bpe'
    tokenizer learns from; the corpus itself may not fit in memory)."""
    if cfg.tokenizer != "bpe":
        return []
    columns = [c for c in (cfg.text_column, cfg.text_pair_column) if c is not None]
    texts, total = [], 0
    for shard in shards:
        try:
            for row, stored in raw_rows(shard, columns):
                try:
                    record = parse(shard, row, stored)
                except DataError:
                    continue  # a bad record: the index pass names it
                found = [record.get(c) for c in columns]
                found = [t for t in found if isinstance(t, str) and lone_surrogate(t) is None]
                texts += found
                total += sum(map(len, found))
                if total >= BPE_SAMPLE:
                    return texts
        except DataError:
            continue  # a file that cannot be read: likewise
    return texts


def eval_examples(examples):
    """The reader of a validation or test split: images without augmentation, fixed masks."""
    if isinstance(examples, ImageExamples):
        return replace(examples, pixels=replace(examples.pixels, augmentation=None))
    if isinstance(examples, TokenExamples) and examples.masking is not None:
        return replace(examples, masking=replace(examples.masking, fixed=True))
    return examples


def dataset_info(cfg, examples, found: dict) -> dict:
    if isinstance(examples, ImageExamples):
        pixels = examples.pixels
        return {
            "in_channels": pixels.channels,
            "image_size": pixels.image_size,
            "num_classes": classes_count(found),
        }
    if isinstance(examples, TextExamples):
        return {
            "task": "classification", "inputs": "tokens", "vocab_size": examples.tokenizer.vocab_size,
            "num_classes": classes_count(found),
        }  # fmt: skip
    return {"task": cfg.task, "vocab_size": examples.tokenizer.vocab_size}


def classes_count(found: dict) -> int:
    return max(len(found["names"]), found["largest"] + 1, 2)


def classes_of(cfg, found: dict, train: list[Shard]) -> tuple[str, ...]:
    """Label names: the records' own, or a Hugging Face ClassLabel's for integer labels."""
    if cfg.task != "classification":
        return ()
    if found["names"]:
        return tuple(found["names"])
    named = class_names(train[0], cfg.label_column) if train[0].kind in ("parquet", "arrow") else None
    return tuple(named) if named else ()
