"""scikit-learn's digits: images for CNNs, 8 rows of 8 features for sequence models.

scikit-learn ships the data and draws the stratified split, but importing it costs a run about
1.3 s (scipy comes with it): more than the rest of a small run's setup. So the images and the
split's indices are kept under ``$ZOO_CACHE/digits``, keyed by scikit-learn's version and the
split's settings, and read back from there without importing it: the same arrays every run.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
from importlib.metadata import version
from pathlib import Path

import numpy as np

from zoo.cache_dir import cache_dir
from zoo.data.dataset import Dataset, Split, image_info, sequence_info
from zoo.tokenizer import write_atomically

SPLITS = ("train", "val", "test")


def load_digits(cfg, input_kind: str) -> Dataset:
    images, y, (train, val, test) = digits_split(cfg.test_fraction, cfg.val_fraction, cfg.split_seed)
    x = (images / 16.0).astype(np.float32)  # pixel values are 0..16
    y = y.astype(np.int64)
    if cfg.classes is not None:
        relabel = {digit: i for i, digit in enumerate(cfg.classes)}
        keep = np.isin(y, cfg.classes)
        train, val, test = (part[keep[part]] for part in (train, val, test))
        y = np.array([relabel.get(int(d), -1) for d in y], dtype=np.int64)
    if cfg.train_per_class is not None:
        # The first n of each class in a seeded order: the same few samples for every run.
        order = np.random.default_rng(cfg.split_seed).permutation(train)
        train = np.concatenate([order[y[order] == c][: cfg.train_per_class] for c in np.unique(y[train])])
    if input_kind == "image":
        x = x[:, None]  # (N, 1, 8, 8)
        info = image_info(x, [y])
    else:
        info = sequence_info(x, [y])  # 8 time steps of 8 features
    splits = [Split(np.ascontiguousarray(x[i]), y[i]) for i in (np.sort(train), np.sort(val), np.sort(test))]
    return Dataset(*splits, task="classification", info=info)


def write_digits_folder(
    out, size: int = 32, rgb: bool = True, per_class: int | None = None, image_format: str = "png"
):
    """scikit-learn's digits as an image folder, ``out/<digit>/<sample>.<ext>``: offline data for
    the ``image_folder`` source (tests, transfer-learning examples). Each 8x8 image is scaled to
    ``size`` px (bicubic) in 8-bit grayscale, stored as RGB unless ``rgb`` is false;
    ``per_class`` keeps the first n of each digit. Returns ``out``."""
    from PIL import Image
    from sklearn.datasets import load_digits as sklearn_digits

    if image_format not in ("png", "jpeg"):
        raise ValueError(f"image_format {image_format!r} is not 'png' or 'jpeg'")
    out = Path(out)
    bunch = sklearn_digits()
    pixels = np.round(bunch.images * (255 / 16)).astype(np.uint8)  # pixel values are 0..16
    written = dict.fromkeys(range(10), 0)
    for index, (image, digit) in enumerate(zip(pixels, bunch.target, strict=True)):
        if per_class is not None and written[digit] >= per_class:
            continue
        picture = Image.fromarray(image, "L").resize((size, size), Image.BICUBIC)
        folder = out / str(digit)
        folder.mkdir(parents=True, exist_ok=True)
        suffix = "jpg" if image_format == "jpeg" else "png"
        (picture.convert("RGB") if rgb else picture).save(folder / f"{index:04d}.{suffix}")
        written[digit] += 1
    return out


def digits_split(
    test_fraction: float, val_fraction: float, split_seed: int
) -> tuple[np.ndarray, np.ndarray, tuple[np.ndarray, ...]]:
    """The digits' (N, 8, 8) images (0..16), their labels and the train, validation and test
    indices of scikit-learn's stratified split: from the cache when this split was drawn before."""
    key = json.dumps(["digits", version("scikit-learn"), test_fraction, val_fraction, split_seed])
    path = cache_dir("digits") / f"split-{hashlib.sha256(key.encode()).hexdigest()[:20]}.npz"
    try:
        with np.load(path) as saved:
            if str(saved["key"]) == key:
                return saved["images"], saved["target"], tuple(saved[name] for name in SPLITS)
    except (OSError, KeyError, ValueError):
        pass  # not drawn yet, or unreadable: draw it again
    images, target, splits = _draw_split(test_fraction, val_fraction, split_seed)
    buffer = io.BytesIO()
    np.savez(
        buffer, key=np.array(key), images=images, target=target, **dict(zip(SPLITS, splits, strict=True))
    )
    with contextlib.suppress(OSError):  # a cache that cannot be written: the next run draws it again
        write_atomically(path, buffer.getvalue())
    return images, target, splits


def _draw_split(
    test_fraction: float, val_fraction: float, split_seed: int
) -> tuple[np.ndarray, np.ndarray, tuple[np.ndarray, ...]]:
    from sklearn.datasets import load_digits as sklearn_digits
    from sklearn.model_selection import train_test_split

    bunch = sklearn_digits()
    y = bunch.target
    index = np.arange(len(y))
    rest, test = train_test_split(index, test_size=test_fraction, stratify=y, random_state=split_seed)
    val_share = val_fraction / (1 - test_fraction)
    if val_share > 0:
        train, val = train_test_split(rest, test_size=val_share, stratify=y[rest], random_state=split_seed)
    else:
        train, val = rest, rest[:0]
    return bunch.images, y, (train, val, test)
