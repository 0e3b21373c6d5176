"""What one image file becomes: decoded by PIL, cropped and resized by PIL, normalised in numpy.

Both frameworks' pipelines call these functions and nothing else, so Lightning and Keras
train on the same pixels bit for bit. The arithmetic is torchvision's, step for step:

- eval: ``Resize(resize)`` (shorter side; bilinear, or the interpolation a checkpoint records,
  timm's bicubic) + ``CenterCrop(image_size)`` +
  ``ToTensor()`` + ``Normalize(mean, std)``;
- training: ``RandomResizedCrop(image_size, scale, ratio)`` + ``RandomHorizontalFlip()``
  (either may be off), then the same conversion and normalisation.

The tests check both against torchvision itself. Only the random draws differ from
torchvision: they come from a counter-based generator (Philox) keyed by (seed, epoch,
sample index), so an image's crop and flip depend on where it is in the run, never on
which process or thread decodes it, nor on what was decoded before.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from PIL import Image

from zoo.errors import DataError

# Separates the augmentation keys from every other generator seeded by (seed, epoch).
AUGMENTATION_STREAM = 0x4155_4731
# torchvision's InterpolationMode of a PIL image is PIL's filter of that name.
FILTERS = {"bilinear": Image.BILINEAR, "bicubic": Image.BICUBIC, "nearest": Image.NEAREST}


class BadImageError(DataError):
    """An image file that PIL cannot decode; the message names the file."""


@dataclass(frozen=True)
class Augmentation:
    random_resized_crop: bool
    scale: tuple[float, float]
    ratio: tuple[float, float]
    horizontal_flip: bool


@dataclass(frozen=True)
class Pixels:
    """How every image of a dataset becomes a model input (a plain dataclass: it travels to
    DataLoader worker processes)."""

    image_size: int  # side of the square the model sees
    resize: int  # the shorter side before the centre crop (eval)
    mode: str  # PIL mode: "RGB" or "L"
    mean: tuple[float, ...]
    std: tuple[float, ...]
    augmentation: Augmentation | None = None
    interpolation: str = "bilinear"  # a key of FILTERS

    @property
    def channels(self) -> int:
        return 1 if self.mode == "L" else 3

    @property
    def filter(self) -> int:
        return FILTERS[self.interpolation]


def open_image(path, mode: str) -> Image.Image:
    """The decoded image in ``mode`` (``convert`` loads every pixel, so a truncated file fails here)."""
    try:
        with Image.open(path) as image:
            return image.convert(mode)
    except (OSError, ValueError, SyntaxError, Image.DecompressionBombError) as error:
        raise BadImageError(f"{path}: cannot be decoded as an image ({error})") from None


def as_array(image: Image.Image) -> np.ndarray:
    """uint8 (H, W, C), a grayscale image included."""
    array = np.asarray(image)
    return array[..., None] if array.ndim == 2 else array


def center(image: Image.Image, pixels: Pixels) -> np.ndarray:
    """torchvision's ``Resize(resize)`` then ``CenterCrop(image_size)``, with its roundings."""
    width, height = image.size
    short, long = min(width, height), max(width, height)
    new_long = int(pixels.resize * long / short)
    size = (pixels.resize, new_long) if width <= height else (new_long, pixels.resize)
    resized = as_array(image.resize(size, pixels.filter))
    top = round((size[1] - pixels.image_size) / 2.0)
    left = round((size[0] - pixels.image_size) / 2.0)
    return resized[top : top + pixels.image_size, left : left + pixels.image_size]


def crop_box(
    rng: np.random.Generator, width: int, height: int, scale: tuple[float, float], ratio: tuple[float, float]
) -> tuple[int, int, int, int]:
    """(top, left, height, width) of a random crop: ``RandomResizedCrop.get_params``' algorithm
    (ten tries at a random area and log-uniform aspect ratio, then a central crop)."""
    area = height * width
    log_ratio = (math.log(ratio[0]), math.log(ratio[1]))
    for _ in range(10):
        target_area = area * rng.uniform(scale[0], scale[1])
        aspect = math.exp(rng.uniform(log_ratio[0], log_ratio[1]))
        w = round(math.sqrt(target_area * aspect))
        h = round(math.sqrt(target_area / aspect))
        if 0 < w <= width and 0 < h <= height:
            top = int(rng.integers(0, height - h + 1))
            left = int(rng.integers(0, width - w + 1))
            return top, left, h, w
    in_ratio = width / height
    if in_ratio < min(ratio):
        w, h = width, round(width / min(ratio))
    elif in_ratio > max(ratio):
        w, h = round(height * max(ratio)), height
    else:
        w, h = width, height
    return (height - h) // 2, (width - w) // 2, h, w


def resized_crop(
    image: Image.Image, box: tuple[int, int, int, int], size: int, resample: int = Image.BILINEAR
) -> np.ndarray:
    """torchvision's ``F.resized_crop``: crop, then resize the crop (PIL's ``box`` argument
    would read pixels outside the crop at its edges, so it is not used)."""
    top, left, h, w = box
    return as_array(image.crop((left, top, left + w, top + h)).resize((size, size), resample))


def augmented(image: Image.Image, pixels: Pixels, rng: np.random.Generator) -> np.ndarray:
    """The training transform; its draws in a fixed order: the crop's, then the flip's."""
    augmentation = pixels.augmentation
    assert augmentation is not None
    if augmentation.random_resized_crop:
        box = crop_box(rng, *image.size, augmentation.scale, augmentation.ratio)
        array = resized_crop(image, box, pixels.image_size, pixels.filter)
    else:
        array = center(image, pixels)
    if augmentation.horizontal_flip and rng.random() < 0.5:
        array = array[:, ::-1]
    return array


def normalize(batch: np.ndarray, pixels: Pixels, channels_last: bool = True) -> np.ndarray:
    """uint8 (N, H, W, C), or (N, C, H, W) -> float32: ``ToTensor``'s x / 255, then ``Normalize``'s
    (x - mean) / std, each a float32 operation as in torch (the same rounding), in place."""
    shape = (-1,) if channels_last else (-1, 1, 1)
    out = batch.astype(np.float32)
    out /= np.float32(255)
    out -= np.asarray(pixels.mean, dtype=np.float32).reshape(shape)
    out /= np.asarray(pixels.std, dtype=np.float32).reshape(shape)
    return out


def epoch_key(seed: int, epoch: int) -> np.ndarray:
    """The Philox key of one epoch's augmentations."""
    return np.random.SeedSequence([seed, epoch, AUGMENTATION_STREAM]).generate_state(2, np.uint64)


def sample_rng(key: np.ndarray, index: int) -> np.random.Generator:
    """Sample ``index``'s own stream: the index sits in the counter's second word, and the
    draws of one image advance only the first, so no two samples ever share a block."""
    return np.random.Generator(np.random.Philox(counter=[0, int(index), 0, 0], key=key))
