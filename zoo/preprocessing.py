"""What a model's inputs went through before its first layer: the preprocessing a checkpoint records.

A model is only as good as the pixels or token ids it is given: the same weights on images
resized another way, normalised with another mean, or labelled in another order give other
answers, silently. So a checkpoint carries, in its ``preprocessing`` metadata (a JSON object,
versioned on its own: docs/checkpoint-format.md):

- ``image``: the eval transform: the square ``size`` the model sees, the shorter side it is
  ``resize`` d to before the centre crop, the ``interpolation``, the ``channels`` and the
  per-channel ``mean``/``std`` (torchvision's ``Resize`` + ``CenterCrop`` + ``ToTensor`` +
  ``Normalize``, timm's ``transforms_imagenet_eval`` at crop mode ``center``);
- ``text``: the tokenizer its ids come from (``tokenizer.json`` beside the checkpoint, or the
  characters of ``task_info.vocab``) with its fingerprint, and for a classifier the longest
  example and the columns a JSONL example is read from;
- ``labels``: the name of each class id (image-folder class names, text label names,
  transformers' ``id2label``, timm's ``label_names``).

A zoo run records what its recipe's data did (zoo.data.preprocessing); an import records
what the foreign files say (a timm ``pretrained_cfg``, torchvision's eval transform,
transformers' ``id2label``), each through its family's format. This module is the record
and its translations to and from timm's ``pretrained_cfg``, which two families read and
write; it imports no other zoo module.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PositiveFloat,
    PositiveInt,
    ValidationError,
    model_validator,
)

PREPROCESSING_VERSION = 1
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
# timm's defaults where a pretrained_cfg leaves a field out (timm.data.resolve_data_config).
TIMM_DEFAULTS = {"interpolation": "bicubic", "crop_pct": 0.875, "crop_mode": "center"}
Interpolation = Literal["bilinear", "bicubic", "nearest"]


class PreprocessingError(ValueError):
    """A preprocessing record (or the foreign config it is read from) that cannot be used."""


class NewerPreprocessing(PreprocessingError):
    """A record of a newer version than this zoo reads: not damaged, but not for this zoo."""


class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ImagePreprocessing(_Record):
    """The eval transform of an image model: resize the shorter side, crop the centre, scale
    to [0, 1], normalise."""

    size: PositiveInt = Field(description="Side of the square crop the model sees.")
    resize: PositiveInt = Field(description="The shorter side is resized to this before the centre crop.")
    interpolation: Interpolation = Field("bilinear", description="How the resize samples (PIL's filter).")
    channels: Literal["rgb", "grayscale"] = Field("rgb", description="Colour images, or one channel.")
    mean: tuple[float, ...] = Field(description="Per-channel mean subtracted from pixels in [0, 1].")
    std: tuple[PositiveFloat, ...] = Field(description="Per-channel standard deviation divided by.")

    @model_validator(mode="after")
    def _consistent(self):
        count = 1 if self.channels == "grayscale" else 3
        for name in ("mean", "std"):
            if len(getattr(self, name)) != count:
                raise ValueError(f"{name} has {len(getattr(self, name))} values for {count} channel(s)")
        if self.resize < self.size:
            raise ValueError(f"resize {self.resize} is smaller than the crop size {self.size}")
        return self

    @property
    def channel_count(self) -> int:
        return 1 if self.channels == "grayscale" else 3

    @property
    def crop_pct(self) -> float:
        """timm's name for size / resize: the share of the resized image the crop keeps. The
        largest float whose ``floor(size / crop_pct)`` is ``resize``, as timm computes it back."""
        pct = self.size / self.resize
        while math.floor(self.size / pct) < self.resize:
            pct = math.nextafter(pct, 0.0)
        while math.floor(self.size / pct) > self.resize:
            pct = math.nextafter(pct, 1.0)
        return pct


class TextPreprocessing(_Record):
    """How text becomes the model's token ids."""

    tokenizer: Literal["tokenizer.json", "characters"] = Field(
        description="tokenizer.json beside the checkpoint, or the characters of task_info.vocab."
    )
    fingerprint: str | None = Field(None, description="zoo.tokenizer.Tokenizer.fingerprint() of it.")
    max_length: PositiveInt | None = Field(
        None, description="A classifier's longest example, special tokens included (longer ones are cut)."
    )
    text_column: str = Field("text", min_length=1, description="The JSONL field of the text.")
    text_pair_column: str | None = Field(
        None, min_length=1, description="The JSONL field of a second text (sentence pairs)."
    )


class Preprocessing(_Record):
    """Everything a user of the checkpoint must do to inputs before the model reads them."""

    version: int = Field(PREPROCESSING_VERSION, ge=1, description="Of this record (not of the file).")
    source: str = Field(description="Where it was read: the recipe's data, or the foreign files imported.")
    image: ImagePreprocessing | None = None
    text: TextPreprocessing | None = None
    labels: tuple[str, ...] | None = Field(None, description="The name of each class id, in id order.")

    def to_json(self) -> str:
        return self.model_dump_json(exclude_none=True)

    def replace(self, **fields: Any) -> Preprocessing:
        """A copy with ``fields`` changed (validated)."""
        return Preprocessing.model_validate({**self.model_dump(), **fields})


def parse_preprocessing(text: str, source: str) -> Preprocessing:
    """The ``preprocessing`` metadata of a checkpoint, checked. One of a newer version than this
    zoo reads is refused (it may mean something this zoo would do wrongly)."""
    try:
        raw = json.loads(text)
    except ValueError as error:
        raise PreprocessingError(f"{source} is not JSON ({error})") from None
    if not isinstance(raw, dict):
        raise PreprocessingError(f"{source} is not a JSON object")
    version = raw.get("version", PREPROCESSING_VERSION)
    if isinstance(version, int) and not isinstance(version, bool) and version > PREPROCESSING_VERSION:
        raise NewerPreprocessing(
            f"{source} is version {version}, newer than this zoo reads ({PREPROCESSING_VERSION}); upgrade zoo"
        )
    try:
        return Preprocessing.model_validate(raw)
    except ValidationError as error:
        problems = "; ".join(
            f"{'.'.join(map(str, e['loc'])) or 'the record'}: {e['msg'].removeprefix('Value error, ')}"
            for e in error.errors()
        )
        raise PreprocessingError(f"{source} does not validate: {problems}") from None


def label_names(found: Any, count: int, where: str) -> tuple[str, ...] | None:
    """Class names from a foreign config: a list in id order, or a mapping id -> name
    (transformers' ``id2label``, whose keys are strings of the ids). None when there are none;
    refused when they do not name exactly the ``count`` ids 0 .. count - 1."""
    if not found:
        return None
    if isinstance(found, Mapping):
        try:
            names = {int(key): value for key, value in found.items()}
        except (TypeError, ValueError):
            raise PreprocessingError(f"{where} has keys that are not class ids: {list(found)[:5]}") from None
        if sorted(names) != list(range(count)):
            raise PreprocessingError(f"{where} names the ids {sorted(names)[:8]}, not 0 .. {count - 1}")
        found = [names[i] for i in range(count)]
    if not isinstance(found, list | tuple) or not all(isinstance(name, str) for name in found):
        raise PreprocessingError(f"{where} is not a list of class names nor a mapping id -> name")
    if len(found) != count:
        raise PreprocessingError(f"{where} has {len(found)} names for {count} classes")
    return tuple(found)


# ------------------------------------------------------------------------------ timm


def read_timm_config(
    meta: Mapping[str, Any], num_classes: int, input_size: tuple[int, int, int]
) -> Preprocessing | None:
    """The preprocessing timm's ``config.json`` describes (its ``pretrained_cfg`` read as
    ``timm.data.resolve_data_config`` reads it, timm's defaults where a field is missing, the
    model's own ``input_size`` where it names none) and its ``label_names``. None without a
    config.json. A crop mode other than ``center`` (timm's ``squash`` and ``border``) is no
    transform zoo computes: refused."""
    if not meta:
        return None
    pretrained = dict(meta.get("pretrained_cfg") or {})
    settings = {**TIMM_DEFAULTS, **{k: v for k, v in pretrained.items() if v is not None}}
    if settings["crop_mode"] != "center":
        raise PreprocessingError(
            f"config.json's pretrained_cfg.crop_mode is {settings['crop_mode']!r}: zoo resizes and crops "
            "the centre ('center') only"
        )
    channels, height, width = pretrained.get("input_size") or input_size
    if height != width or channels not in (1, 3):
        raise PreprocessingError(
            f"config.json's pretrained_cfg.input_size {[channels, height, width]}: zoo's image models read "
            "square images of 1 or 3 channels"
        )
    mean, std = (
        tuple(settings.get(key, fallback))
        for key, fallback in (("mean", IMAGENET_MEAN), ("std", IMAGENET_STD))
    )
    image = ImagePreprocessing(
        size=height,
        resize=math.floor(height / settings["crop_pct"]),
        interpolation=settings["interpolation"],
        channels="grayscale" if channels == 1 else "rgb",
        mean=mean[:1] if channels == 1 else mean,
        std=std[:1] if channels == 1 else std,
    )
    names = meta.get("label_names", pretrained.get("label_names"))
    labels = label_names(names, num_classes, "config.json's label_names")
    return Preprocessing(source="timm config.json (pretrained_cfg)", image=image, labels=labels)


def timm_fields(preprocessing: Preprocessing | None) -> tuple[dict[str, Any], dict[str, Any]]:
    """What timm's ``config.json`` says of a checkpoint's preprocessing: the ``pretrained_cfg``
    fields (input size, interpolation, crop, mean, std) and the top-level ones (``label_names``)."""
    if preprocessing is None:
        return {}, {}
    pretrained: dict[str, Any] = {}
    image = preprocessing.image
    if image is not None:
        pretrained = {
            "input_size": [image.channel_count, image.size, image.size],
            "interpolation": image.interpolation,
            "mean": list(image.mean),
            "std": list(image.std),
            "crop_pct": image.crop_pct,
            "crop_mode": "center",
        }
    top = {"label_names": list(preprocessing.labels)} if preprocessing.labels else {}
    return pretrained, top
