"""``zoo predict``: a checkpoint run on a user's own files, in either framework, with the
preprocessing the checkpoint records.

Inputs are image files (a file, a folder read recursively, a glob), text (a ``.txt`` file, one
example a line; a ``.jsonl`` file, one object a line, read at the checkpoint's text column; or
texts given directly) or ``.npy`` arrays already in the model's canonical layout. Every input
is found and checked before the model is loaded, and what cannot be used (a file that does not
decode, a glob that matches nothing, text for an image model...) is refused in one line naming
it. Then, batch by batch under a progress bar on stderr:

- an image classifier reads each image through the recorded eval transform (resize, centre
  crop, mean/std: zoo.data.pixels, the code its training read the images with), and answers
  the top-k label names with their probabilities; a checkpoint that records no image
  preprocessing (a model trained on arrays) takes images of exactly its size and channels,
  scaled to [0, 1];
- a text classifier tokenizes as its training data was (``[CLS] text [SEP]``, cut to the
  recorded ``max_length``), token classification labels every token, a masked language model
  fills each mask token with its top-k tokens;
- a language model continues each text (zoo.sample's generation: greedy, or sampled with a
  temperature and a seed).

Token choice, softmax and top-k run in numpy on the logits either twin returns, so the two
frameworks answer alike up to their float rounding.
"""

from __future__ import annotations

import glob
import logging
import os
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from zoo.checkpoint.file import CheckpointError
from zoo.checkpoint.metadata import Checkpoint, read_checkpoint
from zoo.data.image_folder import EXTENSIONS, image_paths, problem
from zoo.errors import DataError
from zoo.limits import parse_json, require_regular_file
from zoo.progress import bar

log = logging.getLogger("zoo")

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


@dataclass(frozen=True)
class Prediction:
    """What the model says of one input: ``labels`` (classification: the top-k, best first,
    each ``{"id", "label", "score"}``), ``text`` (a language model: the input followed by the
    generated text), ``tokens`` (token classification: each token's top label; masked language
    modeling: each mask's top-k tokens)."""

    input: str
    labels: list[dict[str, Any]] | None = None
    text: str | None = None
    tokens: list[dict[str, Any]] | None = None

    def to_dict(self) -> dict[str, Any]:
        """The prediction as ``zoo predict --json`` writes it: the fields this task fills."""
        return {key: value for key, value in self.__dict__.items() if value is not None}

    @property
    def top(self) -> str | None:
        """The best label (classification) or the text (language modeling): --quiet's answer."""
        if self.labels:
            return self.labels[0]["label"]
        if self.text is not None:
            return self.text
        return " ".join(str(t.get("label", t.get("tokens", [{}])[0].get("token"))) for t in self.tokens or [])


@dataclass
class Model:
    """A loaded twin and what reading inputs for it takes."""

    checkpoint: Checkpoint
    twin: Any
    keras: bool
    preprocessing: Any = None  # zoo.preprocessing.Preprocessing | None
    tokenizer: Any = None
    labels: tuple[str, ...] = field(default_factory=tuple)


@dataclass(frozen=True)
class Predicted:
    """A run of :func:`predict`: the checkpoint file read, its task and the predictions, which
    it iterates and indexes as the list it holds."""

    checkpoint: Path
    task: str
    predictions: list[Prediction]

    def __iter__(self) -> Iterator[Prediction]:
        return iter(self.predictions)

    def __len__(self) -> int:
        return len(self.predictions)

    def __getitem__(self, index: int) -> Prediction:
        return self.predictions[index]


def predict(
    checkpoint: str | Path,
    inputs: str | Path | np.ndarray | Iterable[str | Path] = (),
    *,
    texts: Sequence[str] = (),
    framework: str = "lightning",
    top_k: int = 5,
    batch_size: int = 32,
    length: int = 50,
    temperature: float = 0.0,
    seed: int = 0,
) -> Predicted:
    """Predictions of a checkpoint (or anything :func:`zoo.load` reads from a path: a run
    folder, a transformers / timm folder imported on the fly) for ``inputs`` (image files,
    folders, globs, .txt / .jsonl / .npy files, or a numpy array in the model's layout) and
    ``texts`` given directly, in input order. ``top_k`` labels (or mask fills) are returned
    per input; a language model generates ``length`` tokens (greedy at ``temperature`` 0)."""
    from zoo.backend import backend_for, framework_name
    from zoo.data.preprocessing import of_checkpoint
    from zoo.loading import locate
    from zoo.sample import Sampling, check_length

    framework = framework_name(framework)
    if top_k < 1 or batch_size < 1:
        raise PredictError(f"top_k and batch_size must be at least 1 (got {top_k} and {batch_size})")
    found = locate(checkpoint)
    if found.checkpoint is None:
        raise CheckpointError(
            f"{checkpoint}: names the architecture {found.name!r}, which has no trained weights; zoo "
            "predict takes a checkpoint (a .safetensors file, a run folder, or a folder to import)"
        )
    opened = read_checkpoint(found.checkpoint)
    task = opened.config.active_task
    if task == "features":
        raise CheckpointError(
            f"{checkpoint}: a {opened.family.name} backbone without a head (task features) predicts "
            "nothing; fine-tune it for a task, or run it with zoo.load"
        )
    if task == "language_modeling":
        check_length(length)
        sampling = Sampling(temperature, None, None, seed)
    preprocessing = of_checkpoint(opened)
    examples = gather(opened, preprocessing, inputs, texts)
    model = Model(opened, None, framework == "keras", preprocessing, labels=_labels(opened, preprocessing))
    if _reads_text(opened):
        model.tokenizer = _tokenizer(opened, preprocessing)
    model.twin = backend_for(framework).load(opened)
    if not model.keras:
        model.twin.eval()
    results: list[Prediction] = []
    with bar(len(examples), "predicting", unit="input") as shown:
        for batch in batches(examples, batch_size):
            if task == "language_modeling":
                results += _generate(model, batch, length, sampling)
            else:
                results += _classify(model, batch, top_k)
            shown.update(len(batch))
    return Predicted(found.adapter or found.checkpoint, task, results)  # a LoRA adapter: the one given


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


# ------------------------------------------------------------------------------ inputs


def _reads_text(checkpoint: Checkpoint) -> bool:
    """A model of token ids (N, T): text goes in. Images are (C, H, W), features (T, F)."""
    return len(checkpoint.config.sample_shape()) == 1


def gather(checkpoint: Checkpoint, preprocessing, inputs: Any, texts: Sequence[str] = ()) -> list[Example]:
    """Every example of ``inputs`` and ``texts``, each checked to be what the model reads."""
    reads = (
        "text" if _reads_text(checkpoint) else "images" if checkpoint.family.input_kind == "image" else None
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
    if _reads_text(checkpoint):
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
    fixed = shape if not _reads_text(checkpoint) else shape[:0]  # token ids: any length
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


# ------------------------------------------------------------------------------ the model's side


def _labels(checkpoint: Checkpoint, preprocessing) -> tuple[str, ...]:
    """The name of each class id: recorded, else the ids themselves."""
    if preprocessing is not None and preprocessing.labels:
        return preprocessing.labels
    return tuple(str(i) for i in range(getattr(checkpoint.config, "num_classes", 0) or 0))


def _tokenizer(checkpoint: Checkpoint, preprocessing):
    """The tokenizer beside the checkpoint; a warning where it is not the one recorded."""
    from zoo.checkpoint_tokenizer import saved_tokenizer

    tokenizer = saved_tokenizer(checkpoint)
    if tokenizer is None:
        raise CheckpointError(
            f"{checkpoint.path}: has no tokenizer (no tokenizer.json beside it, no task_info.vocab): its "
            "token ids mean nothing without the one it was trained with"
        )
    recorded = preprocessing.text if preprocessing is not None else None
    if recorded is not None and recorded.fingerprint and recorded.fingerprint != tokenizer.fingerprint():
        log.warning(
            f"warning: the tokenizer beside {checkpoint.path} is not the one its preprocessing records "
            f"(fingerprint {tokenizer.fingerprint()}, recorded {recorded.fingerprint}): its ids may mean "
            "other text"
        )
    return tokenizer


def logits(
    model: Model, x: np.ndarray, padding_mask: np.ndarray | None = None, token_types=None
) -> np.ndarray:
    """The twin's outputs in inference mode, as float32 numpy, for canonical-layout inputs."""
    extras = {}
    if padding_mask is not None and padding_mask.any():
        extras["padding_mask"] = padding_mask
    if token_types is not None:
        extras["token_type_ids"] = token_types
    if model.keras:
        from zoo.keras.data import keras_layout

        x = keras_layout(x, model.checkpoint.family.input_kind)
        return np.asarray(model.twin(x, **extras, training=False), dtype=np.float32)
    import torch

    with torch.no_grad():
        named = {key: torch.from_numpy(value) for key, value in extras.items()}
        return model.twin(torch.from_numpy(np.ascontiguousarray(x)), **named).float().numpy()


def softmax(values: np.ndarray) -> np.ndarray:
    shifted = np.asarray(values, np.float64) - np.max(values, axis=-1, keepdims=True)
    exp = np.exp(shifted)
    return exp / exp.sum(axis=-1, keepdims=True)


def top(probabilities: np.ndarray, k: int) -> np.ndarray:
    """The ``k`` largest entries' indices, best first (ties: the lower id first, as argmax)."""
    return np.argsort(-probabilities, kind="stable")[:k]


def _classify(model: Model, batch: list[Example], top_k: int) -> list[Prediction]:
    task = model.checkpoint.config.active_task
    if batch[0].kind != "text":
        x = _images(model, batch) if batch[0].kind == "image" else _stacked(model, batch)
        return [
            _top_labels(model, e.name, row, top_k) for e, row in zip(batch, logits(model, x), strict=True)
        ]
    ids, mask, types = _encoded(model, batch)
    out = logits(model, ids, mask, types)
    if task == "classification":
        return [_top_labels(model, e.name, row, top_k) for e, row in zip(batch, out, strict=True)]
    if task == "token_classification":
        return [
            _tagged(model, e.name, row_ids, row, ~row_mask)
            for e, row_ids, row, row_mask in zip(batch, ids, out, mask, strict=True)
        ]
    return [
        _filled(model, e.name, row_ids, row, top_k) for e, row_ids, row in zip(batch, ids, out, strict=True)
    ]


def _top_labels(model: Model, name: str, row: np.ndarray, k: int) -> Prediction:
    probabilities = softmax(row)
    best = top(probabilities, k)
    return Prediction(
        name,
        labels=[{"id": int(i), "label": model.labels[i], "score": float(probabilities[i])} for i in best],
    )


def _stacked(model: Model, batch: list[Example]) -> np.ndarray:
    dtype = model.checkpoint.family.inputs.dtype(model.checkpoint.config.active_task)
    return np.stack([e.array for e in batch]).astype(dtype)


def _images(model: Model, batch: list[Example]) -> np.ndarray:
    """Decoded with the recorded eval transform (zoo.data.image_files, as training read them);
    without one, the pixels as they are, in [0, 1], at exactly the model's size."""
    from zoo.data.image_files import ImageFiles
    from zoo.data.preprocessing import pixels

    image = model.preprocessing.image if model.preprocessing is not None else None
    files = np.array([os.fsencode(e.path.resolve()) for e in batch], dtype=bytes)
    if image is not None:
        _check_image_model(model, image)
        return ImageFiles("", files, pixels(image)).batch(np.arange(len(batch)))
    return np.stack([_raw_image(model, e.path) for e in batch])


def _check_image_model(model: Model, image) -> None:
    channels, height, width = model.checkpoint.config.sample_shape()
    if (image.channel_count, image.size, image.size) != (channels, height, width):
        raise CheckpointError(
            f"{model.checkpoint.path}: its preprocessing makes {image.channel_count} x {image.size} x "
            f"{image.size} images but the model reads {channels} x {height} x {width}; the file "
            "contradicts itself"
        )


def _raw_image(model: Model, path: Path) -> np.ndarray:
    from PIL import Image

    from zoo.data.pixels import as_array, open_image

    channels, height, width = model.checkpoint.config.sample_shape()
    if channels not in (1, 3):
        raise PredictError(f"{path}: the model reads {channels}-channel images, which no image file holds")
    mode = "L" if channels == 1 else "RGB"
    with Image.open(path) as original:
        found = (original.width, original.height, Image.getmodebase(original.mode))
    if found != (width, height, mode):
        raise PredictError(
            f"{path}: a {found[0]}x{found[1]} {_colour(found[2])} image, but the model reads "
            f"{width}x{height} {_colour(mode)} images and {model.checkpoint.path} records no "
            "preprocessing to bring it there (it was trained on arrays): convert the images to that first"
        )
    image = open_image(path, mode)
    return (as_array(image).transpose(2, 0, 1) / np.float32(255)).astype(np.float32)


def _colour(mode: str) -> str:
    return "grayscale" if mode == "L" else "RGB"


def _encoded(model: Model, batch: list[Example]):
    """Token ids, padding mask and (for sentence pairs) token types, as the training data was
    encoded: ``[CLS] text [SEP] (pair [SEP])`` where the tokenizer has those tokens, longest
    first cut to the recorded max_length (else the model's context)."""
    from zoo.data.text_classification import encode_examples, padded

    recorded = model.preprocessing.text if model.preprocessing is not None else None
    limit = (
        (recorded.max_length if recorded is not None else None)
        or model.checkpoint.config.context_length()
        or 512
    )
    pairs = [e.pair for e in batch] if batch[0].pair is not None else None
    try:
        ids, types, cut = encode_examples(model.tokenizer, [e.text for e in batch], pairs, limit)
    except ValueError as error:
        raise PredictError(
            f"{batch[0].name}...: the model's tokenizer cannot encode the text: {error}"
        ) from None
    if cut:
        log.info(f"{cut} of {len(batch)} inputs were longer than {limit} tokens and cut to fit")
    x, mask, segments = padded(ids, types, model.tokenizer.padding_id, pairs is not None)
    return x, mask, segments


def _token(model: Model, token_id: int) -> str:
    return model.tokenizer.backend.id_to_token(int(token_id)) or str(int(token_id))


def _tagged(model: Model, name: str, ids: np.ndarray, out: np.ndarray, kept: np.ndarray) -> Prediction:
    """Each token's best label (special tokens and padding left out)."""
    special = model.tokenizer.special_ids
    tokens = []
    for position in np.flatnonzero(kept):
        if int(ids[position]) in special:
            continue
        probabilities = softmax(out[position])
        best = int(top(probabilities, 1)[0])
        tokens.append({
            "token": _token(model, ids[position]), "label": model.labels[best], "id": best,
            "score": float(probabilities[best]),
        })  # fmt: skip
    return Prediction(name, tokens=tokens)


def _filled(model: Model, name: str, ids: np.ndarray, out: np.ndarray, k: int) -> Prediction:
    """The top-k tokens at each mask token of the input."""
    mask_id = model.tokenizer.mask_id
    positions = np.flatnonzero(ids == mask_id) if mask_id is not None else []
    if not len(positions):
        token = _token(model, mask_id) if mask_id is not None else "a mask token"
        raise PredictError(f"{name}: has no {token} for the masked language model to fill")
    fills = []
    for position in positions:
        probabilities = softmax(out[position])
        fills.append({
            "position": int(position),
            "tokens": [
                {"token": _token(model, i), "id": int(i), "score": float(probabilities[i])}
                for i in top(probabilities, k)
            ],
        })  # fmt: skip
    return Prediction(name, tokens=fills)


def _generate(model: Model, batch: list[Example], length: int, sampling) -> list[Prediction]:
    """Each text continued by ``length`` tokens. A model with a key/value cache generates the
    batch at once, its prompts padded on the left; any other, one prompt at a time."""
    from zoo.sample import PromptError, eos_ids, generate, start_id, until_eos

    prompts = []
    for example in batch:
        try:
            ids = model.tokenizer.encode(example.text)
        except ValueError as error:
            raise PromptError(f"{example.name}: the model's tokenizer cannot encode it: {error}") from None
        prompts.append(ids or [start_id(model.tokenizer)])
    cached = callable(getattr(model.twin, "decode", None))
    stops = eos_ids(model.twin.zoo_config, model.tokenizer)  # each text ends at its end of sequence
    groups = [list(range(len(batch)))] if cached else [[i] for i in range(len(batch))]
    generated: dict[int, np.ndarray] = {}
    for group in groups:
        width = max(len(prompts[i]) for i in group)
        ids = np.full((len(group), width), model.tokenizer.padding_id, dtype=np.int64)
        padding = np.ones((len(group), width), dtype=bool)
        for row, i in enumerate(group):
            ids[row, width - len(prompts[i]) :] = prompts[i]
            padding[row, width - len(prompts[i]) :] = False
        out = generate(model.twin, ids, length, sampling, padding_mask=padding if cached else None, eos=stops)
        generated.update(zip(group, out, strict=True))
    return [
        Prediction(e.name, text=e.text + model.tokenizer.decode(until_eos(generated[i], stops)))
        for i, e in enumerate(batch)
    ]
