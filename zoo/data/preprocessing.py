"""A zoo run's preprocessing (what its checkpoint records: zoo.preprocessing), read from its
recipe's data section, and a checkpoint's preprocessing carried into the data of a fine-tune.

The same reading serves checkpoints written before the record existed: their metadata holds
the resolved recipe, whose data section says the same (the label names of an image folder or
a labelled text file apart, which only the data knew).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from zoo.checkpoint_tokenizer import tokenizer_file
from zoo.data.pixels import Pixels
from zoo.preprocessing import ImagePreprocessing, Preprocessing, TextPreprocessing
from zoo.tokenizer import Tokenizer

if TYPE_CHECKING:
    from zoo.checkpoint.metadata import Checkpoint

log = logging.getLogger("zoo")

# The embedded digits as images: 8 x 8, one channel, pixel values 0..16 scaled to [0, 1]. An 8-bit
# image of a digit (zoo.data.digits.write_digits_folder) read as x / 255 is the same up to rounding.
DIGITS = ImagePreprocessing(size=8, resize=8, channels="grayscale", mean=(0.0,), std=(1.0,))
RECIPE_SOURCE = "the recipe's data section"


def of_recipe_data(
    data: Mapping[str, Any],
    input_kind: str,
    *,
    labels: Sequence[str] = (),
    tokenizer: Tokenizer | None = None,
    tokenizer_file: bool = True,
) -> Preprocessing | None:
    """The preprocessing of a model trained on ``data`` (a resolved recipe's data section, as a
    dict) and read as ``input_kind``: ``labels`` are the data's class names where it named them
    (image folders, labelled text), ``tokenizer`` what turned its text into ids (the fingerprint
    is recorded), or, for a checkpoint written before the record, ``tokenizer_file`` whether a
    tokenizer.json lies beside it. None where the data says nothing (arrays of an npz)."""
    name = data.get("name", "digits")
    image = _image(data) if input_kind == "image" else None
    text = _text(data, tokenizer, tokenizer_file) if name in ("text", "text_classification") else None
    names = tuple(labels) or named_classes(data)
    if image is None and text is None and not names:
        return None
    return Preprocessing(source=RECIPE_SOURCE, image=image, text=text, labels=names or None)


def _image(data: Mapping[str, Any]) -> ImagePreprocessing | None:
    if data.get("name", "digits") == "digits":
        return DIGITS
    if data.get("name") != "image_folder":
        return None  # an npz's arrays are whatever the user made them
    size = int(data.get("image_size", 224))
    return ImagePreprocessing(
        size=size,
        resize=int(data.get("resize") or size),
        interpolation=data.get("interpolation", "bilinear"),
        channels=data.get("channels", "rgb"),
        mean=tuple(data["mean"]),
        std=tuple(data["std"]),
    )


def _text(data: Mapping[str, Any], tokenizer: Tokenizer | None, tokenizer_file: bool) -> TextPreprocessing:
    if tokenizer is not None:
        kind, fingerprint = "tokenizer.json", tokenizer.fingerprint()  # training saves it beside
    else:
        kind, fingerprint = ("tokenizer.json" if tokenizer_file else "characters"), None
    if data.get("name") != "text_classification":
        return TextPreprocessing(tokenizer=kind, fingerprint=fingerprint)
    return TextPreprocessing(
        tokenizer=kind,
        fingerprint=fingerprint,
        max_length=data.get("max_length"),
        text_column=data.get("text_column", "text"),
        text_pair_column=data.get("text_pair_column"),
    )


def named_classes(data: Mapping[str, Any]) -> tuple[str, ...]:
    """The class names the data section itself gives: the digits (all ten, or the chosen ones in
    their label order), an image folder's chosen class folders."""
    name = data.get("name", "digits")
    if name == "digits":
        return tuple(str(d) for d in (data.get("classes") or range(10)))
    if name == "image_folder" and data.get("classes"):
        return tuple(data["classes"])
    return ()


def of_checkpoint(checkpoint: Checkpoint) -> Preprocessing | None:
    """What a checkpoint records, or for one written before the record, what the recipe in its
    metadata says (None for an import or a model saved by hand without either)."""
    recorded = checkpoint.preprocessing
    if recorded is not None:
        return recorded
    data = checkpoint.json("recipe", {}).get("data")
    if not isinstance(data, dict):
        return None
    found = of_recipe_data(
        data, checkpoint.family.input_kind, tokenizer_file=tokenizer_file(checkpoint.path) is not None
    )
    return fitting_labels(found, checkpoint.config)


def fitting_labels(preprocessing: Preprocessing | None, config) -> Preprocessing | None:
    """Label names only where they are as many as the model's classes (a digits recipe's names
    describe the digits model, not a text model's classes)."""
    if preprocessing is None or preprocessing.labels is None:
        return preprocessing
    if getattr(config, "num_classes", None) == len(preprocessing.labels):
        return preprocessing
    return preprocessing.replace(labels=None)


def pixels(image: ImagePreprocessing) -> Pixels:
    """The decoding settings (zoo.data.pixels) of a recorded eval transform."""
    return Pixels(
        image_size=image.size,
        resize=image.resize,
        mode="L" if image.channels == "grayscale" else "RGB",
        mean=image.mean,
        std=image.std,
        interpolation=image.interpolation,
    )


# ------------------------------------------------------------------------------ fine-tuning

# The recipe's image_folder fields that describe one thing together: a checkpoint's values are
# taken for a group only where the recipe sets none of it (a resize is meaningless without the
# crop it was chosen for, a mean without its channels).
GROUPS = (("image_size", "resize"), ("channels", "mean", "std"), ("interpolation",))


def fine_tune_data(data, preprocessing: Preprocessing | None, source: str):
    """``data`` (a recipe's data section) with the preprocessing a checkpoint records where the
    recipe leaves it open; a note for what it takes and a warning for what the recipe sets
    otherwise (the model then sees other pixels than it was trained on)."""
    image = preprocessing.image if preprocessing is not None else None
    if image is None:
        return data
    if data.name != "image_folder":
        _warn_other_pixels(data, image, source)
        return data
    recorded = {
        "image_size": image.size, "resize": image.resize, "interpolation": image.interpolation,
        "channels": image.channels, "mean": image.mean, "std": image.std,
    }  # fmt: skip
    current = {key: getattr(data, key) for key in recorded}
    current["resize"] = current["resize"] or current["image_size"]
    taken, overridden = {}, []
    for group in GROUPS:
        if not set(group) & data.model_fields_set:
            taken.update({key: recorded[key] for key in group})
        else:
            overridden += [key for key in group if _differs(current[key], recorded[key])]
    changed = {key: value for key, value in taken.items() if _differs(current[key], value)}
    if changed:
        log.info(
            f"preprocessing of {source}: " + ", ".join(f"data.{k} {_shown(v)}" for k, v in changed.items())
        )
    if overridden:
        log.warning(
            f"the recipe sets {', '.join(f'data.{k} {_shown(current[k])}' for k in overridden)}, not the "
            f"preprocessing of {source} ({', '.join(f'{k} {_shown(recorded[k])}' for k in overridden)}): "
            "the model sees other pixels than it was trained on"
        )
    if not changed:
        return data
    return type(data).model_validate({**data.model_dump(exclude_unset=True), **changed})


def _warn_other_pixels(data, image: ImagePreprocessing, source: str) -> None:
    if data.name == "digits" and image == DIGITS:
        return
    given = "8x8 grayscale digits in [0, 1]" if data.name == "digits" else f"the arrays of data {data.name}"
    log.warning(
        f"{source} was trained on {image.size}px {image.channels} images normalised with mean "
        f"{_shown(image.mean)} and std {_shown(image.std)}; data {data.name} gives {given}, as they are"
    )


def _differs(a: Any, b: Any) -> bool:
    return (tuple(a) if isinstance(a, list | tuple) else a) != (
        tuple(b) if isinstance(b, list | tuple) else b
    )


def _shown(value: Any) -> str:
    return str(list(value)) if isinstance(value, tuple | list) else str(value)
