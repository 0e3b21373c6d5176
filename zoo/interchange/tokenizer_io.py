"""A transformers folder's tokenizer, read on ``zoo import`` (so that the imported checkpoint
samples and fine-tunes with the token ids its weights were trained on), and a tokenizer saved
beside a checkpoint with its ``tokenizer_config.json`` (``zoo import``, ``zoo export``).
"""

from __future__ import annotations

import json
from pathlib import Path

from zoo.checkpoint_tokenizer import tokenizer_config
from zoo.interchange import InterchangeError
from zoo.limits import read_json
from zoo.tokenizer import TOKENIZER_CONFIG, TokenizerError, load_tokenizer, write_atomically

TOKENIZER_FILES = ("tokenizer.json", "vocab.json", "vocab.txt")


def save_tokenizer(tokenizer, src: Path, folder: Path) -> Path:
    """The tokenizer beside its checkpoint, with the source's ``tokenizer_config.json`` (the
    special tokens' roles, which tokenizer.json does not say), or one made from the tokenizer."""
    saved = tokenizer.save(folder)
    settings = src / TOKENIZER_CONFIG if src.is_dir() else None
    if settings is not None and settings.is_file():
        fix = "it should be transformers' tokenizer_config.json, or be removed"
        found = read_json(settings, error=InterchangeError, fix=fix)
    else:
        found = tokenizer_config(tokenizer)
    write_atomically(folder / TOKENIZER_CONFIG, json.dumps(found, indent=2) + "\n")
    return saved


def source_tokenizer(src: Path, config):
    """The tokenizer a transformers directory carries (tokenizer.json, GPT-2's vocab.json +
    merges.txt, or BERT's vocab.txt, lower-cased as its tokenizer_config.json says), so that the
    imported checkpoint samples and fine-tunes with the token ids its weights were trained on."""
    if not src.is_dir() or not any((src / name).is_file() for name in TOKENIZER_FILES):
        return None
    lowercase = None
    if not (src / "tokenizer.json").is_file() and (src / "vocab.txt").is_file():
        settings = src / "tokenizer_config.json"
        if settings.is_file():
            fix = "it should be transformers' tokenizer_config.json, or be removed"
            found = read_json(settings, error=InterchangeError, fix=fix)
            lowercase = bool(found.get("do_lower_case", True))
    try:
        tokenizer = load_tokenizer(src, lowercase)
    except (TokenizerError, ValueError) as error:
        raise InterchangeError(f"{src}: its tokenizer files cannot be read: {error}") from None
    vocab = getattr(config, "vocab_size", None)
    if vocab is not None and tokenizer.vocab_size > vocab:
        raise InterchangeError(
            f"{src}: its tokenizer has {tokenizer.vocab_size} tokens but the weights' vocabulary "
            f"has {vocab}; the tokenizer files belong to another model"
        )
    return tokenizer
