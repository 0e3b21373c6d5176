"""How much zoo reads of a file it did not write in this run, and JSON read within those bounds.

JSON and YAML parsers recurse once per level of nesting and keep whatever they are given: a
config.json nested 5,000 deep ends in ``RecursionError``, a 5,000-digit number in a
``ValueError`` about ``sys.set_int_max_str_digits``, and 30 aliases of aliases make a YAML
document of a billion values. So every JSON document from outside (checkpoint metadata, an
imported folder's config.json, tokenizer_config.json and safetensors index, a run's records,
JSONL data, TF_CONFIG) goes through :func:`parse_json` / :func:`read_json`, and recipes through
the YAML loader of :mod:`zoo.recipe.overrides`, against the limits below. Each refusal is one
line naming the source, raised as the caller's own error class (a checkpoint's problems are
``CheckpointError``, a data file's ``DataError``), so a command exits 2 with it.

The limits are far above anything zoo or transformers write (a recipe is a few levels deep and
holds tens of values; transformers' largest index or tokenizer config is a few MB) and far
below what would take the process down. They are listed in docs/failure-modes.md.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

MAX_DEPTH = 100  # arrays/objects (JSON) or sequences/mappings (YAML) inside one another
MAX_JSON_BYTES = 16 * 2**20  # one JSON document: a file, a metadata value, a JSONL line
MAX_RECIPE_BYTES = 2**20  # one YAML recipe file
MAX_RECIPE_VALUES = 10_000  # YAML nodes of a recipe, each alias counted as the values it stands for
MAX_SHOWN_PROBLEMS = 20  # a recipe's problems printed one a line; the rest are counted
# Tokens one ``zoo sample`` generates at most. Each is a forward pass, and every id is kept:
# 100,000 take minutes (a micro model) to hours (GPT-2) on a CPU; 10**9 asked for 8 GB of ids
# and years of steps before printing anything.
MAX_SAMPLE_LENGTH = 100_000
# Tokens of a trained BPE at most (``zoo tokenizer train``, data.bpe_vocab_size): four times
# the largest vocabularies in use; the trainer reserves memory by the size asked for, and
# aborts the process (no exception) from about 2**31.
MAX_VOCAB_SIZE = 1_000_000
# The other counts a command line takes (docs/cli.md lists each option's bound). Far above any use,
# far below what would run for years or take the machine's memory before saying anything:
# - training steps ``zoo compare`` runs and times (both twins take each step, and the compared
#   batches are kept for its checks: zoo.peak_memory counts them, 16 KB a step for a GPT-2 batch
#   of 8 x 128 tokens, before anything is built);
MAX_COMPARE_STEPS = 100_000
# - examples a forward pass takes (``--batch-size``): the memory check sizes smaller batches;
MAX_BATCH_SIZE = 2**20
# - labels or tokens shown per input (``--top-k``): as many as a model can have (MAX_CLASSES,
#   MAX_VOCAB_SIZE);
MAX_TOP_K = 1_000_000
# - how often a pair must occur to merge (``--min-frequency``): the BPE trainer takes a 64-bit
#   count and fails on more with an OverflowError; no text has 2**32 pairs to merge;
MAX_MIN_FREQUENCY = 2**32
# - attention heads of an imported model (``--num-heads``): each divides the model's width.
MAX_HEADS = 65_536

# What a path is when it is not a regular file or a folder: opening a FIFO for reading waits for
# a writer (forever, on a pipe nobody writes to), /dev/zero and /dev/urandom never end, and a
# socket cannot be opened at all. zoo reads none of them.
_SPECIAL_KINDS = (
    (stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"),
)  # fmt: skip

# JSON's words for Python's types, for "is a JSON array, not an object".
_JSON_KINDS = {dict: "object", list: "array", str: "string", int: "number", float: "number", bool: "boolean"}


def special_file(path: str | Path) -> str | None:
    """What ``path`` is in words ("a FIFO (named pipe)", "a character device", ...) when it is
    neither a regular file nor a folder; None for those, and for a path that does not exist
    (the caller says so in its own words). A link is judged by what it points to."""
    try:
        mode = os.stat(path).st_mode
    except (OSError, ValueError):  # missing, unreadable, a NUL in the name: not for this check
        return None
    return next((words for test, words in _SPECIAL_KINDS if test(mode)), None)


def special_file_problem(path: str | Path) -> str | None:
    """The one line that refuses ``path`` when it is a FIFO, a device or a socket; else None."""
    kind = special_file(path)
    if kind is None:
        return None
    return (
        f"{path} is {kind}, not a regular file: a pipe or device would block or never end; "
        "give a regular file"
    )


def require_regular_file(path: str | Path, error: type[Exception]) -> None:
    """Refuse ``path`` with one line (``error``) when it is a FIFO, a device or a socket:
    every file zoo reads goes through here before it is opened, so such an input is named at
    once instead of blocking (a FIFO) or being read without end (/dev/zero)."""
    problem = special_file_problem(path)
    if problem is not None:
        raise error(problem)


def json_kind(value: Any) -> str:
    return "null" if value is None else _JSON_KINDS.get(type(value), type(value).__name__)


def parse_json(
    text: str | bytes,
    source: str,
    *,
    error: type[Exception],
    expect: type | None = dict,
    fix: str = "",
) -> Any:
    """``text`` as JSON, refused with one line (``error(f"{source} ...; {fix}")``) when it is
    larger than :data:`MAX_JSON_BYTES`, not UTF-8, not JSON, nested deeper than
    :data:`MAX_DEPTH`, or (``expect``) not a JSON object / array / ... at the top."""

    def refuse(problem: str) -> Exception:
        return error(f"{source} {problem}" + (f"; {fix}" if fix else ""))

    if len(text) > MAX_JSON_BYTES:  # characters of a str: at least as many bytes
        unit = "bytes" if isinstance(text, bytes) else "characters"
        raise refuse(f"is {len(text):,} {unit}, more than the {MAX_JSON_BYTES:,} bytes zoo reads as JSON")
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as decode:
            raise refuse(f"is not UTF-8 text (byte {decode.start}: {decode.reason})") from None
    try:
        value = json.loads(text)
    except json.JSONDecodeError as decode:
        raise refuse(f"is not JSON ({decode.msg} at line {decode.lineno} column {decode.colno})") from None
    except RecursionError:  # nested so deep that the parser itself gave up
        raise refuse(_too_deep()) from None
    except ValueError as decode:  # a number of more digits than Python converts
        raise refuse(f"is not JSON zoo reads ({str(decode).split(';')[0]})") from None
    if depth(value) > MAX_DEPTH:
        raise refuse(_too_deep())
    if expect is not None and not isinstance(value, expect):
        raise refuse(
            f"is a JSON {json_kind(value)}, not {_article(_JSON_KINDS.get(expect, expect.__name__))}"
        )
    return value


def read_json(path: str | Path, *, error: type[Exception], expect: type | None = dict, fix: str = "") -> Any:
    """The JSON file ``path`` under :func:`parse_json`'s limits; its size is checked before
    it is read. A file that cannot be opened raises the system's ``OSError``."""
    path = Path(path)
    require_regular_file(path, error)
    size = path.stat().st_size
    if size > MAX_JSON_BYTES:
        message = f"{path} is {size:,} bytes, more than the {MAX_JSON_BYTES:,} bytes zoo reads as JSON"
        raise error(message + (f"; {fix}" if fix else ""))
    return parse_json(path.read_bytes(), str(path), error=error, expect=expect, fix=fix)


def depth(value: Any) -> int:
    """Levels of arrays/objects in a parsed JSON value (a scalar is 0), counted without
    recursion: the value may be as deep as the parser could go."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        node, level = stack.pop()
        if isinstance(node, dict):
            node = node.values()
        elif not isinstance(node, list):
            continue
        deepest = max(deepest, level)
        stack.extend((item, level + 1) for item in node if isinstance(item, dict | list))
    return deepest


def _too_deep() -> str:
    return f"nests arrays and objects more than {MAX_DEPTH} levels deep, more than zoo reads"


def _article(word: str) -> str:
    return f"an {word}" if word[:1] in "aeiou" else f"a {word}"
