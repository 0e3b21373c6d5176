"""The ``image_folder`` source: ``root/<class>/<image>``, as torchvision's ``ImageFolder`` and
Keras' ``image_dataset_from_directory`` read it.

Class folders sorted by name are the label ids. A root with ``train/`` (and optionally
``val/``, ``test/``) holding class folders gives the splits; a split without its folder is
carved out of the training images, the same seeded share of every class. Files are found
recursively under each class folder (``.jpg``, ``.jpeg``, ``.png``, any case; hidden files
and folders are left out, other files are counted and ignored). Every file is checked when
the folder is read (``check_files``), and an unreadable one stops the load naming it, or is
left out and counted (``on_bad_file``). Pixels are decoded later, batch by batch
(:mod:`zoo.data.image_files`).
"""

from __future__ import annotations

import logging
import os
import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import BinaryIO

import numpy as np
from PIL import Image

from zoo.cache_dir import cache_dir
from zoo.data.dataset import Dataset, Split
from zoo.data.digits import write_digits_folder
from zoo.data.image_files import ImageFiles
from zoo.data.pixels import Augmentation, Pixels
from zoo.errors import DataError
from zoo.limits import special_file
from zoo.registry import families_reading

EXTENSIONS = (".jpg", ".jpeg", ".png")
SPLITS = ("train", "val", "test")
log = logging.getLogger("zoo.data")


def load_image_folder(cfg, input_kind: str) -> Dataset:
    if input_kind != "image":
        raise DataError(
            f"data.name 'image_folder' gives images, but the model reads {input_kind}s; "
            f"use an image architecture ({families_reading('image')})"
        )
    root = (cfg.root or embedded_digits(cfg.image_size)).resolve()
    folders = split_folders(root)
    for name in ("val", "test"):
        if name in folders and f"{name}_fraction" in cfg.model_fields_set:
            raise DataError(
                f"data.{name}_fraction is set, but {folders[name]} is the {name} split; "
                f"remove data.{name}_fraction (it only carves a split that has no folder)"
            )
    known = class_names(folders["train"])
    classes = chosen_classes(known, cfg.classes, folders["train"])
    files: dict[str, list[str]] = {}
    labels: dict[str, np.ndarray] = {}
    for name, folder in folders.items():
        files[name], labels[name] = labelled_files(root, folder, classes, name, known)
    for name in folders:
        files[name], labels[name] = readable_only(root, files[name], labels[name], cfg)
    counts = np.bincount(labels["train"], minlength=len(classes))
    lost = [name for name, count in zip(classes, counts, strict=True) if not count]
    if lost:
        raise DataError(f"{folders['train']}: class folder(s) {', '.join(lost)} have no readable image left")
    carve = {name: getattr(cfg, f"{name}_fraction") for name in ("test", "val") if name not in folders}
    if carve:
        parts = stratified_split(labels["train"], carve, cfg.split_seed)
        pool_files, pool_labels = np.array(files["train"]), labels["train"]
        for name, index in parts.items():
            files[name], labels[name] = list(pool_files[index]), pool_labels[index]
    if cfg.train_per_class is not None:
        keep = first_per_class(labels["train"], cfg.train_per_class, cfg.split_seed)
        files["train"], labels["train"] = [files["train"][i] for i in keep], labels["train"][keep]
    if not len(labels["test"]):
        raise DataError(
            f"{root}: the test split is empty; add a test/ folder of class folders, "
            "or set data.test_fraction > 0 (and have enough images per class)"
        )
    pixels = pixels_for(cfg)
    workers = cfg.workers if cfg.workers is not None else min(8, os.cpu_count() or 1)
    splits = []
    for name in SPLITS:
        encoded = np.array([os.fsencode(f) for f in files[name]], dtype=bytes)
        augment = name == "train" and pixels.augmentation is not None
        splits.append(Split(ImageFiles(str(root), encoded, pixels, augment, workers), labels[name]))
    info = {
        "task": "classification",
        "in_channels": pixels.channels,
        "image_size": pixels.image_size,
        "num_classes": len(classes),
    }
    return Dataset(*splits, task="classification", info=info, classes=tuple(classes))


def pixels_for(cfg) -> Pixels:
    augmentation = None
    if cfg.augment is not None:
        a = cfg.augment
        augmentation = Augmentation(a.random_resized_crop, tuple(a.scale), tuple(a.ratio), a.horizontal_flip)
    return Pixels(
        image_size=cfg.image_size,
        resize=cfg.resize or cfg.image_size,
        mode="L" if cfg.channels == "grayscale" else "RGB",
        mean=tuple(cfg.mean),
        std=tuple(cfg.std),
        augmentation=augmentation,
        interpolation=cfg.interpolation,
    )


def subfolders(folder: Path) -> list[str]:
    return sorted(e.name for e in os.scandir(folder) if e.is_dir() and not e.name.startswith("."))


def split_folders(root: Path) -> dict[str, Path]:
    """``{"train": root}`` for a root of class folders; the split folders a root of splits has."""
    found = set(subfolders(root))
    named = found & set(SPLITS)
    if "train" not in found:
        if named and named == found:
            raise DataError(
                f"{root} has {', '.join(f'{n}/' for n in sorted(named))} but no train/; "
                "a root of splits needs train/<class>/<image>"
            )
        return {"train": root}
    others = found - set(SPLITS)
    if others:
        raise DataError(
            f"{root} has train/ next to other folders ({', '.join(sorted(others))}); either "
            "root/<class>/<image>, or root/train/<class>/<image> with optional val/ and test/"
        )
    return {name: root / name for name in SPLITS if name in found}


def class_names(train: Path) -> list[str]:
    classes = subfolders(train)
    if len(classes) < 2:
        raise DataError(
            f"{train} has {len(classes)} class folder(s) ({', '.join(classes) or 'none'}); "
            "image_folder needs at least two: <root>/<class>/<image>"
        )
    return classes


def embedded_digits(size: int) -> Path:
    """scikit-learn's digits as a folder of ``size`` px RGB PNGs, written once under
    ``$ZOO_CACHE`` (default ``~/.cache/zoo``): the offline default of ``image_folder``."""
    folder = cache_dir(f"digits-{size}px")
    if not (folder / ".complete").is_file():
        partial = folder.parent / f".digits-{size}px.{os.getpid()}"
        write_digits_folder(partial, size=size)
        (partial / ".complete").touch()
        try:
            partial.rename(folder)  # another process may have finished first: keep its folder
        except OSError:
            shutil.rmtree(partial, ignore_errors=True)
    return folder


def chosen_classes(known: list[str], chosen: list[str] | None, train: Path) -> list[str]:
    """``data.classes`` (checked against the folders), or every class folder."""
    if chosen is None:
        return known
    missing = [name for name in chosen if name not in known]
    if missing:
        raise DataError(f"data.classes names {', '.join(missing)}, which {train} has no folder for; it has: "
                        f"{', '.join(known)}")  # fmt: skip
    return list(chosen)


def first_per_class(labels: np.ndarray, count: int, seed: int) -> np.ndarray:
    """Sorted indices of ``count`` seeded-random training images of each class (all of a
    class that has fewer)."""
    rng = np.random.default_rng([seed, count])
    chosen = [rng.permutation(np.flatnonzero(labels == label))[:count] for label in np.unique(labels)]
    return np.sort(np.concatenate(chosen)).astype(np.int64)


def labelled_files(
    root: Path, folder: Path, classes: list[str], split: str, known: list[str] | None = None
) -> tuple[list[str], np.ndarray]:
    """Image paths under ``folder``'s class folders (relative to ``root``) and their labels:
    the position of their class in ``classes``; folders of ``known`` classes not chosen are left out."""
    unknown = sorted(set(subfolders(folder)) - set(known or classes))
    if unknown:
        raise DataError(
            f"{folder} has class folders that train/ lacks: {', '.join(unknown)}; every split "
            "takes its classes (and label ids) from train/"
        )
    files, labels, ignored = [], [], 0
    empty = []
    for label, name in enumerate(classes):
        if not (folder / name).is_dir():
            continue  # a val or test split may lack a class
        found, skipped = image_paths(folder / name)
        ignored += skipped
        if not found and split == "train":
            empty.append(name)
        files += [os.path.relpath(path, root) for path in found]
        labels += [label] * len(found)
    if empty:
        raise DataError(
            f"{folder}: no .jpg, .jpeg or .png images in class folder(s) {', '.join(empty)}; "
            "every class needs training images"
        )
    if ignored:
        log.info(f"{folder}: ignored {ignored} file(s) that are not .jpg, .jpeg or .png")
    return files, np.array(labels, dtype=np.int64)


def image_paths(folder: Path) -> tuple[list[str], int]:
    """Image files under ``folder``, recursively, in a fixed order; and how many others there were."""
    found, ignored = [], 0
    for parent, dirs, names in os.walk(folder, followlinks=True):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in sorted(names):
            if name.startswith("."):
                continue
            if name.lower().endswith(EXTENSIONS):
                found.append(os.path.join(parent, name))
            else:
                ignored += 1
    return found, ignored


def problem(path: Path | BinaryIO, decode: bool) -> str | None:
    """Why ``path`` is not a usable image, or None: its header (or, ``decode``, every pixel) read.
    A FIFO, a device or a socket is not opened at all: reading one blocks or never ends."""
    kind = special_file(path) if isinstance(path, str | os.PathLike) else None  # not bytes in memory
    if kind is not None:
        return f"is {kind}, not a regular file"
    try:
        with Image.open(path) as image:
            if decode:
                image.load()
    except (OSError, ValueError, SyntaxError, Image.DecompressionBombError) as error:
        return str(error) or type(error).__name__
    return None


def readable_only(root: Path, files: list[str], labels: np.ndarray, cfg) -> tuple[list[str], np.ndarray]:
    """The files that pass ``data.check_files``; the others stop the load (``on_bad_file:
    error``, naming the first) or are left out and counted (``skip``)."""
    decode = cfg.check_files == "decode"
    with ThreadPoolExecutor() as pool:  # PIL releases the GIL while it reads and decodes
        problems = list(pool.map(lambda f: problem(root / f, decode), files))
    bad = [i for i, p in enumerate(problems) if p is not None]
    if not bad:
        return files, labels
    first = f"{root / files[bad[0]]}: not a readable image ({problems[bad[0]]})"
    if cfg.on_bad_file == "error":
        raise DataError(
            f"{first}; {len(bad)} of {len(files)} file(s) cannot be read. Remove or replace them, "
            "or set data.on_bad_file=skip to leave them out"
        )
    log.warning(f"skipped {len(bad)} of {len(files)} image file(s) that cannot be read; the first: {first}")
    keep = np.ones(len(files), dtype=bool)
    keep[bad] = False
    return [f for f, k in zip(files, keep, strict=True) if k], labels[keep]


def stratified_split(labels: np.ndarray, fractions: dict[str, float], seed: int) -> dict[str, np.ndarray]:
    """Sorted indices of ``train`` and of each split in ``fractions``, each holding its share of
    every class (rounded per class), from one generator seeded by ``seed``."""
    rng = np.random.default_rng(seed)
    parts: dict[str, list[np.ndarray]] = {name: [] for name in ("train", *fractions)}
    for label in np.unique(labels):
        members = rng.permutation(np.flatnonzero(labels == label))
        start = 0
        for name, fraction in fractions.items():
            count = round(fraction * len(members))
            parts[name].append(members[start : start + count])
            start += count
        parts["train"].append(members[start:])
    return {name: np.sort(np.concatenate(chunks)).astype(np.int64) for name, chunks in parts.items()}
