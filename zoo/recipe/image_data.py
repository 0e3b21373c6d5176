"""The recipe's image inputs: how image files become the model's input (size, resize, channels,
normalisation, training augmentation), shared by an image folder and a streamed image set, and the
``image_folder`` source itself."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, PositiveFloat, PositiveInt, model_validator

from zoo.preprocessing import IMAGENET_MEAN, IMAGENET_STD, Interpolation
from zoo.recipe.data import DataBase, Section


def _switch(value: Any) -> Any:
    """``augment: true`` is every default augmentation; ``false`` is none."""
    if value is True:
        return {}
    return None if value is False else value


class Augmentation(Section):
    """Training-time augmentation, torchvision's ImageNet recipe: ``RandomResizedCrop`` then
    ``RandomHorizontalFlip``. Drawn per sample from (trainer.seed, epoch, sample index), the
    same in both frameworks; validation and test images get the eval transform."""

    random_resized_crop: bool = Field(
        True,
        description="Crop a random area and aspect ratio of the image, resized to image_size; "
        "false: the eval transform (resize, centre crop).",
    )
    scale: tuple[Annotated[float, Field(gt=0, le=1)], Annotated[float, Field(gt=0, le=1)]] = Field(
        (0.08, 1.0), description="Range of the crop's area, as a share of the image's."
    )
    ratio: tuple[PositiveFloat, PositiveFloat] = Field(
        (3 / 4, 4 / 3), description="Range of the crop's aspect ratio (width / height), drawn log-uniformly."
    )
    horizontal_flip: bool = Field(True, description="Mirror half the images left to right.")

    @model_validator(mode="after")
    def _meaningful(self):
        for name in ("scale", "ratio"):
            low, high = getattr(self, name)
            if low > high:
                raise ValueError(
                    f"data.augment.{name} {[low, high]} is not a range: its first value is the larger"
                )
        crop_fields = {"scale", "ratio"} & self.model_fields_set
        if not self.random_resized_crop and crop_fields:
            raise ValueError(
                f"data.augment.{sorted(crop_fields)[0]} is set but data.augment.random_resized_crop is "
                "false; remove it or turn the crop on"
            )
        if not self.random_resized_crop and not self.horizontal_flip:
            raise ValueError("data.augment turns every augmentation off; write augment: null instead")
        return self


class ImageInput(DataBase):
    """How image files become the model's input: the fields an image folder and a streamed
    image set share (:func:`zoo.data.image_folder.pixels_for` reads them)."""

    image_size: PositiveInt = Field(224, description="Side of the square image the model sees.")
    resize: PositiveInt | None = Field(
        None,
        description="Eval transform: the shorter side is resized to this, then the centre "
        "image_size square is cropped (torchvision's Resize + CenterCrop); None: image_size.",
    )
    interpolation: Interpolation = Field(
        "bilinear",
        description="How images are resized (torchvision's InterpolationMode: PIL's filter of that name); "
        "timm's models are trained with bicubic.",
    )
    channels: Literal["rgb", "grayscale"] = Field("rgb", description="Colour images, or one channel.")
    mean: tuple[float, ...] = Field(
        IMAGENET_MEAN,
        description="Per-channel mean subtracted from pixels in [0, 1]; default ImageNet's "
        "(for grayscale, the average of its three).",
    )
    std: tuple[PositiveFloat, ...] = Field(
        IMAGENET_STD, description="Per-channel standard deviation divided by; default ImageNet's."
    )
    augment: Annotated[Augmentation | None, BeforeValidator(_switch)] = Field(
        None, description="Training augmentation (true: the defaults); null: none."
    )

    @model_validator(mode="before")
    @classmethod
    def _grayscale_defaults(cls, raw: Any) -> Any:
        """Grayscale without its own mean/std takes the average of ImageNet's three channels."""
        if isinstance(raw, dict) and raw.get("channels") == "grayscale":
            for key, rgb in (("mean", IMAGENET_MEAN), ("std", IMAGENET_STD)):
                if raw.get(key) is None:
                    raw = {**raw, key: (round(sum(rgb) / 3, 4),)}
        return raw

    @model_validator(mode="after")
    def _pixels_consistent(self):
        if self.resize is not None and self.resize < self.image_size:
            raise ValueError(
                f"data.resize {self.resize} is smaller than data.image_size {self.image_size}; the "
                "centre crop must fit in the resized image (ImageNet's eval: resize 256, image_size 224)"
            )
        channels = 1 if self.channels == "grayscale" else 3
        for name in ("mean", "std"):
            if len(getattr(self, name)) != channels:
                raise ValueError(
                    f"data.{name} has {len(getattr(self, name))} value(s) but data.channels "
                    f"{self.channels!r} has {channels}"
                )
        return self


IMAGE_FIELDS = tuple(ImageInput.model_fields.keys() - DataBase.model_fields.keys())
WORKERS_DESCRIPTION = (
    "Decoding processes (torch DataLoader workers) and parallel map calls (tf.data); "
    "0 decodes in the training process; None: the CPU count, at most 8."
)


class ImageFolderData(ImageInput):
    """Image files in class folders: ``root/<class>/<image>`` (torchvision's ImageFolder, Keras'
    image_dataset_from_directory), or ``root/train/<class>/...`` with optional ``val/`` and
    ``test/``. Classes sorted by name are the label ids; JPEG and PNG files are decoded batch by
    batch, identically in both frameworks."""

    name: Literal["image_folder"] = "image_folder"
    root: Path | None = Field(
        None,
        description="The folder of class folders (or of train/, val/, test/ folders); null: the "
        "embedded digits, written once as image_size PNGs into ~/.cache/zoo (offline).",
    )
    classes: list[str] | None = Field(
        None, min_length=2, description="Keep only these class folders, label ids in this order (transfer)."
    )
    train_per_class: PositiveInt | None = Field(
        None, description="Keep only this many training images of each class (few-shot fine-tuning)."
    )
    val_fraction: float = Field(
        0.1, ge=0, lt=0.5, description="Share of each class carved from train for validation, without val/."
    )
    test_fraction: float = Field(
        0.1, ge=0, lt=0.5, description="Share of each class carved from train for testing, without test/."
    )
    split_seed: int = Field(0, description="Seed of the carved splits (not the training seed).")
    check_files: Literal["header", "decode"] = Field(
        "header",
        description="How every file is checked when the folder is read: 'header' opens it (fast); "
        "'decode' decodes every pixel once (slow, also finds truncated files).",
    )
    on_bad_file: Literal["error", "skip"] = Field(
        "error",
        description="A file that fails the check stops the load naming it, or is left out and counted.",
    )
    workers: int | None = Field(None, ge=0, description=WORKERS_DESCRIPTION)

    @model_validator(mode="after")
    def _consistent(self):
        if self.classes is not None and len(set(self.classes)) != len(self.classes):
            raise ValueError(f"data.classes {self.classes} names a class twice")
        if self.root is not None and not self.root.is_dir():
            raise ValueError(
                f"data.root {str(self.root)!r} is not a folder; give the folder of class folders "
                "(root/<class>/<image>)"
            )
        return self
