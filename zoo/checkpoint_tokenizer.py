"""The tokenizer a checkpoint travels with: its ``tokenizer.json`` next to the
``model.safetensors`` (or the character vocabulary in its metadata), and the files that carry
it into another folder (transformers' ``tokenizer_config.json`` beside it).

Apart from :mod:`zoo.tokenizer` (what a tokenizer is, reading and training one), which the
data package and ``zoo tokenizer`` use without reading a checkpoint.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from zoo.checkpoint.file import CheckpointError
from zoo.checkpoint.metadata import Checkpoint, read_checkpoint
from zoo.tokenizer import (
    SPECIAL_NAMES,
    TOKENIZER_CONFIG,
    TOKENIZER_FILE,
    CharTokenizer,
    Tokenizer,
    load_tokenizer,
    write_atomically,
)


def tokenizer_of(checkpoint: str | Path) -> Tokenizer:
    """The tokenizer of a checkpoint: its ``tokenizer.json`` (next to the .safetensors file),
    else the character vocabulary in its metadata (``task_info.vocab``)."""
    found = saved_tokenizer(read_checkpoint(checkpoint))
    if found is not None:
        return found
    raise CheckpointError(
        f"{checkpoint}: has no tokenizer: no {TOKENIZER_FILE} next to it and no character "
        "vocabulary (task_info.vocab) in its metadata"
    )


def saved_tokenizer(checkpoint: Checkpoint) -> Tokenizer | None:
    """The tokenizer an opened :class:`zoo.checkpoint.metadata.Checkpoint` travels with, or None (an image
    model's). A tokenizer.json that the model's vocabulary cannot hold is refused."""
    found = tokenizer_file(checkpoint.path)
    if found is not None:
        tokenizer = load_tokenizer(found)
    else:
        vocab = checkpoint.json("task_info", {}).get("vocab")
        if not vocab:
            return None
        tokenizer = CharTokenizer(vocab, source=f"{checkpoint.path} (task_info.vocab)")
    model_vocab = getattr(checkpoint.config, "vocab_size", None)
    if model_vocab is not None and tokenizer.vocab_size > model_vocab:
        raise CheckpointError(
            f"{checkpoint.path}: its tokenizer ({found or 'task_info.vocab'}) has {tokenizer.vocab_size} "
            f"tokens but the model's vocab_size is {model_vocab}; the tokenizer belongs to another model"
        )
    return tokenizer


def tokenizer_config(tokenizer: Tokenizer) -> dict[str, Any]:
    """transformers' ``tokenizer_config.json`` for a ``tokenizer.json``: a fast tokenizer with its
    special tokens named by role, without which ``AutoTokenizer`` knows no ``eos_token``."""
    config: dict[str, Any] = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "clean_up_tokenization_spaces": False,
    }
    for role in SPECIAL_NAMES:
        token_id = tokenizer.special(role)
        if token_id is not None:
            config[f"{role}_token"] = tokenizer.backend.id_to_token(token_id)
    start = tokenizer.backend.token_to_id("<s>")
    if start is not None or config.get("eos_token") == "<|endoftext|>":  # GPT-2 starts with its end of text
        config["bos_token"] = "<s>" if start is not None else "<|endoftext|>"
    return config


def carry_tokenizer(sources: Sequence[Path], folder: Path) -> list[Path]:
    """Write :func:`tokenizer_files` into ``folder``; returns the files written."""
    return [write_atomically(path, text) for path, text in tokenizer_files(sources, folder).items()]


def tokenizer_files(sources: Sequence[Path], folder: Path) -> dict[Path, str]:
    """What travels into ``folder`` with a model: the ``tokenizer.json`` and
    ``tokenizer_config.json`` of the first of ``sources`` (folders) that has one, or settings
    made from that tokenizer (:func:`tokenizer_config`), read and checked before anything is
    written; a file that is already the one in ``folder`` is left out."""
    files: dict[Path, str] = {}
    tokenizer = next((s / TOKENIZER_FILE for s in sources if (s / TOKENIZER_FILE).is_file()), None)
    if tokenizer is None:
        return files
    loaded = load_tokenizer(tokenizer)  # a tokenizer that does not load does not travel
    if not _same_file(tokenizer, folder / TOKENIZER_FILE):
        files[folder / TOKENIZER_FILE] = tokenizer.read_text(encoding="utf-8")
    settings = next((s / TOKENIZER_CONFIG for s in sources if (s / TOKENIZER_CONFIG).is_file()), None)
    if settings is None:
        files[folder / TOKENIZER_CONFIG] = json.dumps(tokenizer_config(loaded), indent=2) + "\n"
    elif not _same_file(settings, folder / TOKENIZER_CONFIG):
        files[folder / TOKENIZER_CONFIG] = settings.read_text(encoding="utf-8")
    return files


def _same_file(a: Path, b: Path) -> bool:
    return b.exists() and a.resolve() == b.resolve()


def tokenizer_file(checkpoint: str | Path) -> Path | None:
    path = Path(checkpoint).with_name(TOKENIZER_FILE)
    return path if path.is_file() else None
