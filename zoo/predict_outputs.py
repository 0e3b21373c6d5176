"""``zoo predict``'s answers: a loaded twin run on a batch of inputs, and its outputs read as
predictions.

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

import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from zoo.checkpoint.file import CheckpointError
from zoo.checkpoint.metadata import Checkpoint
from zoo.checkpoint_tokenizer import saved_tokenizer
from zoo.data.image_files import ImageFiles
from zoo.data.pixels import as_array, open_image
from zoo.data.preprocessing import pixels
from zoo.data.text_classification import encode_examples, padded
from zoo.keras.data import keras_layout
from zoo.predict_inputs import Example, PredictError
from zoo.sample import PromptError, eos_ids, generate, start_id, until_eos

log = logging.getLogger("zoo")


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


def class_labels(checkpoint: Checkpoint, preprocessing) -> tuple[str, ...]:
    """The name of each class id: recorded, else the ids themselves."""
    if preprocessing is not None and preprocessing.labels:
        return preprocessing.labels
    return tuple(str(i) for i in range(getattr(checkpoint.config, "num_classes", 0) or 0))


def model_tokenizer(checkpoint: Checkpoint, preprocessing):
    """The tokenizer beside the checkpoint; a warning where it is not the one recorded."""
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
    """The twin's outputs in inference mode, as float32 numpy, for canonical-layout inputs: the
    Keras twin through its traced forward (one trace for every batch), the torch twin eager
    under ``torch.inference_mode``."""
    extras = {}
    if padding_mask is not None and padding_mask.any():
        extras["padding_mask"] = padding_mask
    if token_types is not None:
        extras["token_type_ids"] = token_types
    if model.keras:  # one traced function for every batch
        from zoo.nn.keras.inference import traced_forward  # imports TensorFlow

        return traced_forward(model.twin)(keras_layout(x, model.checkpoint.family.input_kind), **extras)
    import torch

    with torch.inference_mode():
        named = {key: torch.from_numpy(value) for key, value in extras.items()}
        return model.twin(torch.from_numpy(np.ascontiguousarray(x)), **named).float().numpy()


def softmax(values: np.ndarray) -> np.ndarray:
    shifted = np.asarray(values, np.float64) - np.max(values, axis=-1, keepdims=True)
    exp = np.exp(shifted)
    return exp / exp.sum(axis=-1, keepdims=True)


def top(probabilities: np.ndarray, k: int) -> np.ndarray:
    """The ``k`` largest entries' indices, best first (ties: the lower id first, as argmax)."""
    return np.argsort(-probabilities, kind="stable")[:k]


def classify(model: Model, batch: list[Example], top_k: int) -> list[Prediction]:
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


def generate_texts(model: Model, batch: list[Example], length: int, sampling) -> list[Prediction]:
    """Each text continued by ``length`` tokens. A model with a key/value cache generates the
    batch at once, its prompts padded on the left; any other, one prompt at a time."""
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
