"""``zoo tokenizer``: train a byte-level BPE on local text and look at what a tokenizer does.

The work is :mod:`zoo.tokenizer`'s; these commands read the files and print.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from pathlib import Path

import click

from zoo.checkpoint_tokenizer import tokenizer_of
from zoo.cli.errors import user_errors
from zoo.cli.output import emit_json, for_scripts, script_output
from zoo.data import DataError
from zoo.data.text import embedded_corpus, read_file
from zoo.limits import MAX_MIN_FREQUENCY, MAX_VOCAB_SIZE
from zoo.overwrite import refuse_inputs_as_outputs
from zoo.tokenizer import DEFAULT_SPECIAL_TOKENS, TOKENIZER_FILE, load_tokenizer, train_bpe, write_atomically

log = logging.getLogger("zoo")


@click.group("tokenizer")
def tokenizer() -> None:
    """Train and inspect tokenizers (tokenizer.json, vocab.txt, vocab.json + merges.txt)."""


@tokenizer.command("train")
@click.argument("files", nargs=-1, type=click.Path(exists=True, path_type=Path))
@click.option(
    "-o", "--out", "--output", "out", type=click.Path(), default="tokenizer.json", show_default=True,
    help="The tokenizer.json to write; a folder (an existing one, or a path ending in '/') gets "
    "tokenizer.json inside it. (--output is the older spelling.)",
)  # fmt: skip
@click.option("--vocab-size", type=click.IntRange(2, MAX_VOCAB_SIZE), default=8192, show_default=True,
              help="Tokens of the trained BPE (its 256 bytes and special tokens included).")  # fmt: skip
@click.option(
    "--special-tokens", default=",".join(DEFAULT_SPECIAL_TOKENS),
    show_default=True, help="Comma-separated special tokens, given the first ids in this order.",
)  # fmt: skip
@click.option("--min-frequency", type=click.IntRange(1, MAX_MIN_FREQUENCY), default=2, show_default=True,
              help="A pair merges only if it occurs this often.")  # fmt: skip
@for_scripts
@user_errors
def train(
    files: tuple[Path, ...], out: str, vocab_size: int, special_tokens: str, min_frequency: int,
    as_json: bool, quiet: bool,
) -> None:  # fmt: skip
    """Train a byte-level BPE (GPT-2's scheme) on FILES: UTF-8 text files or folders of .txt
    files; none: Python's own documentation (pydoc_data.topics, offline). A vocabulary smaller
    than --vocab-size (the text has no more pairs to merge) is said. --quiet prints the
    tokenizer.json path."""
    with script_output(quiet, as_json):
        target = tokenizer_target(out)
        refuse_inputs_as_outputs([target], text_files(files), DataError, option="-o")
        texts = list(read_texts(files))
        if not any(text.strip() for text in texts):  # a BPE of bytes alone, learnt from nothing
            raise DataError(
                f"{', '.join(map(str, files))}: no text to learn from (empty, or only whitespace); "
                "give UTF-8 text files with the text the tokenizer is for"
            )
        specials = [t.strip() for t in special_tokens.split(",") if t.strip()]
        trained = train_bpe(texts, vocab_size, specials, min_frequency)
        write_atomically(target, trained.to_json())
        if trained.vocab_size < vocab_size:
            log.warning(
                f"warning: {target} has {trained.vocab_size} tokens, not the {vocab_size} asked: no pair of "
                f"tokens occurs --min-frequency {min_frequency} times in the text any more. Give more text, "
                f"a lower --min-frequency, or --vocab-size {trained.vocab_size} to say what you get"
            )
    characters = sum(len(t) for t in texts)
    if as_json:
        emit_json({
            "path": str(target), "kind": "byte-level BPE", "vocab_size": trained.vocab_size,
            "vocab_size_asked": vocab_size, "special_tokens": specials, "characters": characters,
            "files": [str(f) for f in files],
        })  # fmt: skip
    elif quiet:
        click.echo(str(target))
    else:
        asked = f" ({vocab_size} asked)" if trained.vocab_size < vocab_size else ""
        click.echo(
            f"wrote {target}: byte-level BPE, {trained.vocab_size} tokens{asked} "
            f"(special: {', '.join(specials) or 'none'}) from {characters:,} characters"
        )


def tokenizer_target(out: str) -> Path:
    """The file ``-o`` names: ``tokenizer.json`` inside a folder (one that exists, or a path
    ending in '/', created), else the path itself, which ends in .json: zoo (and Hugging Face's
    ``tokenizers``) read a tokenizer file by that suffix, so anything else would not read back."""
    path = Path(out)
    if out.endswith(("/", os.sep)) or path.is_dir():
        return path / TOKENIZER_FILE
    if path.suffix != ".json":
        raise DataError(
            f"-o {out}: a tokenizer file is read back by its .json suffix; give {out}.json for a file, "
            f"or {out}/ for a folder holding {TOKENIZER_FILE}"
        )
    return path


@tokenizer.command("encode")
@click.argument("tokenizer_path", metavar="TOKENIZER", type=click.Path(exists=True, path_type=Path))
@click.argument("text")
@for_scripts
@user_errors
def encode(tokenizer_path: Path, text: str, as_json: bool, quiet: bool) -> None:
    """Print the ids and tokens TOKENIZER (a file, a folder or a checkpoint) gives TEXT.
    --quiet prints the ids only."""
    if tokenizer_path.suffix == ".safetensors":
        found = tokenizer_of(tokenizer_path)
    else:
        found = load_tokenizer(tokenizer_path)
    ids = found.encode(text)
    tokens = [found.decode([i]) for i in ids]
    if as_json:
        emit_json({"ids": list(ids), "tokens": tokens})
        return
    click.echo(" ".join(map(str, ids)))
    if not quiet:
        click.echo(" | ".join(tokens))


def read_texts(files: tuple[Path, ...]) -> Iterator[str]:
    """The text of each file, of each .txt file under each folder; the embedded docs if none."""
    if not files:
        yield embedded_corpus()
        return
    for file in text_files(files):
        yield read_file(file)


def text_files(files: tuple[Path, ...]) -> list[Path]:
    """Each file, and each .txt file under each folder."""
    found = []
    for path in files:
        inside = sorted(p for p in path.rglob("*.txt") if p.is_file()) if path.is_dir() else [path]
        if not inside:
            raise DataError(f"{path}: a folder without .txt files")
        found += inside
    return found
