"""``zoo predict``'s inputs: every file, folder, glob, array and text it is given, found and
checked against what the model reads before the model is loaded.

Inputs are image files (a file, a folder read recursively, a glob), text (a ``.txt`` file, one
example a line; a ``.jsonl`` file, one object a line, read at the checkpoint's text column; or
texts given directly) or ``.npy`` arrays already in the model's canonical layout. What cannot be
used (a file that does not decode, a glob that matches nothing, text for an image model...) is
refused in one line naming it.
"""

from __future__ import annotations

import glob
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from zoo.checkpoint.metadata import Checkpoint
from zoo.data.image_folder import EXTENSIONS, image_paths, problem
from zoo.errors import DataError
from zoo.limits import parse_json, require_regular_file

TEXT_SUFFIXES = (".txt", ".text")
JSONL_SUFFIXES = (".jsonl", ".ndjson")
ARRAY_SUFFIX = ".npy"
GLOB_CHARACTERS = frozenset("*?[")
SHOWN_TEXT = 60  # characters of a text given directly that name it in the output


class PredictError(DataError):
    """An input that cannot be predicted on; the message names it and what would work."""


@dataclass(frozen=True)
class Example:
    """One input: an image file, a text (and its pair), or a row of an array."""

    name: str
    path: Path | None = None
    text: str | None = None
    pair: str | None = None
    array: np.ndarray | None = None

    @property
    def kind(self) -> str:
        return "array" if self.array is not None else "image" if self.path is not None else "text"


def batches(examples: list[Example], size: int) -> Iterable[list[Example]]:
    """Runs of at most ``size`` examples of one kind (arrays, image files, texts), in order."""
    batch: list[Example] = []
    for example in examples:
        if batch and (len(batch) == size or example.kind != batch[0].kind):
            yield batch
            batch = []
        batch.append(example)
    if batch:
        yield batch


def reads_text(checkpoint: Checkpoint) -> bool:
    """A model of token ids (N, T): text goes in. Images are (C, H, W), features (T, F)."""
    return len(checkpoint.config.sample_shape()) == 1


def gather(checkpoint: Checkpoint, preprocessing, inputs: Any, texts: Sequence[str] = ()) -> list[Example]:
    """Every example of ``inputs`` and ``texts``, each checked to be what the model reads."""
    reads = (
        "text" if reads_text(checkpoint) else "images" if checkpoint.family.input_kind == "image" else None
    )
    if isinstance(inputs, np.ndarray):
        return _array_examples("the array", inputs, checkpoint)
    specs = [inputs] if isinstance(inputs, str | Path) else list(inputs)
    examples: list[Example] = []
    for spec in specs:
        for path in _expand(spec):
            examples += _file_examples(path, reads, checkpoint, preprocessing)
    if texts:
        if reads != "text":
            raise PredictError(f"texts were given, but the {_reader(checkpoint)}")
        examples += [Example(_shown_text(t), text=t) for t in texts]
    if not examples:
        raise PredictError(
            "nothing to predict: give image files, folders, globs, .txt/.jsonl/.npy files, or texts"
        )
    return examples


def _reader(checkpoint: Checkpoint) -> str:
    """What the model reads, for messages."""
    if reads_text(checkpoint):
        return f"model reads text (a {checkpoint.family.name} {checkpoint.config.active_task} model)"
    if checkpoint.family.input_kind == "image":
        return f"model reads images ({', '.join(EXTENSIONS)})"
    shape = ", ".join(map(str, checkpoint.config.sample_shape()))
    return f"model reads sequences of features ({ARRAY_SUFFIX} arrays of shape (N, {shape}))"


def _expand(spec: str | Path) -> list[Path]:
    """A path as it is, or the files a glob matches (sorted); nothing matched or found is refused."""
    path = Path(spec)
    if path.exists():
        return [path]
    if GLOB_CHARACTERS & set(str(spec)):
        matched = sorted(glob.glob(str(spec), recursive=True))
        if not matched:
            raise PredictError(f"{spec}: matches no file")
        return [Path(m) for m in matched]
    raise PredictError(f"{spec}: no such file or folder")


def _file_examples(path: Path, reads: str | None, checkpoint: Checkpoint, preprocessing) -> list[Example]:
    suffix = path.suffix.lower()
    require_regular_file(path, PredictError)  # a FIFO named x.png, here or in a folder: never opened
    if path.is_dir():
        return _folder_examples(path, reads, checkpoint, preprocessing)
    if suffix == ARRAY_SUFFIX:
        return _array_examples(path, _load_array(path), checkpoint)
    if reads == "images":
        if suffix in TEXT_SUFFIXES + JSONL_SUFFIXES:
            raise PredictError(f"{path}: a text file, but the {_reader(checkpoint)}")
        if suffix not in EXTENSIONS:
            raise PredictError(f"{path}: not an image file; the {_reader(checkpoint)}")
        found = problem(path, decode=False)
        if found is not None:
            raise PredictError(f"{path}: not a readable image ({found})")
        return [Example(str(path), path=path)]
    if reads == "text":
        if suffix in EXTENSIONS:
            raise PredictError(f"{path}: an image, but the {_reader(checkpoint)}: give .txt or .jsonl files")
        if suffix in JSONL_SUFFIXES:
            return _jsonl_examples(path, preprocessing)
        if suffix in TEXT_SUFFIXES:
            return _line_examples(path, preprocessing)
        raise PredictError(
            f"{path}: zoo predict reads text from .txt (one example a line) or .jsonl (one JSON object "
            "a line) files"
        )
    raise PredictError(f"{path}: the {_reader(checkpoint)}")


def _folder_examples(path: Path, reads: str | None, checkpoint: Checkpoint, preprocessing) -> list[Example]:
    if reads == "images":
        found, _ = image_paths(path)
        if not found:
            raise PredictError(f"{path}: holds no {', '.join(EXTENSIONS)} images")
        return [e for f in found for e in _file_examples(Path(f), reads, checkpoint, preprocessing)]
    wanted = TEXT_SUFFIXES + JSONL_SUFFIXES if reads == "text" else (ARRAY_SUFFIX,)
    files = sorted(p for p in path.rglob("*") if p.is_file() and p.suffix.lower() in wanted)
    if not files:
        raise PredictError(f"{path}: holds no {', '.join(wanted)} files; the {_reader(checkpoint)}")
    return [e for f in files for e in _file_examples(f, reads, checkpoint, preprocessing)]


def _read_text(path: Path) -> list[str]:
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError as error:
        raise PredictError(f"{path}: not UTF-8 text ({error})") from None
    if not any(line.strip() for line in lines):
        raise PredictError(f"{path}: holds no text (every line is empty)")
    return lines


def _pair_column(preprocessing) -> str | None:
    text = preprocessing.text if preprocessing is not None else None
    return text.text_pair_column if text is not None else None


def _line_examples(path: Path, preprocessing) -> list[Example]:
    """One example a non-empty line; for a model of sentence pairs, the pair after a tab."""
    pairs = _pair_column(preprocessing) is not None
    examples = []
    for number, line in enumerate(_read_text(path), start=1):
        if not line.strip():
            continue
        first, tab, second = line.partition("\t")
        if pairs and not tab:
            raise PredictError(
                f"{path}, line {number}: the model reads sentence pairs: write them as TEXT<tab>PAIR "
                "(or use a .jsonl file)"
            )
        examples.append(
            Example(f"{path}:{number}", text=first if pairs else line, pair=second if pairs else None)
        )
    return examples


def _jsonl_examples(path: Path, preprocessing) -> list[Example]:
    """One example an object, its text at the checkpoint's text column (``text`` by default)."""
    recorded = preprocessing.text if preprocessing is not None else None
    column = recorded.text_column if recorded is not None else "text"
    pair = _pair_column(preprocessing)
    examples = []
    for number, line in enumerate(_read_text(path), start=1):
        if not line.strip():
            continue
        fix = "a .jsonl file holds one JSON object a line"
        row = parse_json(line, f"{path}, line {number}:", error=PredictError, fix=fix)
        texts = []
        for key in (column, pair) if pair else (column,):
            value = row.get(key)
            if not isinstance(value, str) or not value.strip():
                raise PredictError(
                    f"{path}, line {number}: no text at {key!r} (the model's text column); it has "
                    f"{', '.join(map(repr, row)) or 'no fields'}"
                )
            texts.append(value)
        examples.append(Example(f"{path}:{number}", text=texts[0], pair=texts[1] if pair else None))
    return examples


def _load_array(path: Path) -> np.ndarray:
    try:
        return np.load(path, allow_pickle=False)
    except (OSError, ValueError) as error:
        raise PredictError(
            f"{path}: not a readable .npy array ({error}); arrays of objects are not read"
        ) from None


def _array_examples(name: str | Path, array: np.ndarray, checkpoint: Checkpoint) -> list[Example]:
    """Rows of an array in the canonical layout (one sample, or a batch of them)."""
    shape = checkpoint.config.sample_shape()
    fixed = shape if not reads_text(checkpoint) else shape[:0]  # token ids: any length
    array = np.asarray(array)
    if array.ndim == len(shape):
        array = array[None]
    if array.ndim != len(shape) + 1 or tuple(array.shape[len(array.shape) - len(fixed) :]) != fixed:
        wanted = ", ".join(map(str, shape)) if fixed else "T"
        raise PredictError(f"{name}: an array of shape {list(array.shape)}; the model reads (N, {wanted})")
    return [Example(f"{name}[{i}]", array=row) for i, row in enumerate(array)]


def _shown_text(text: str) -> str:
    one_line = " ".join(text.split())
    return one_line if len(one_line) <= SHOWN_TEXT else one_line[: SHOWN_TEXT - 3] + "..."
