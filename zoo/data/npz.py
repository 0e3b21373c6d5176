"""A user's arrays in one ``.npz`` file (loaded without pickle)."""

from __future__ import annotations

import numpy as np

from zoo.data.dataset import Dataset, Split, image_info, sequence_info
from zoo.errors import DataError
from zoo.family import MAX_CLASSES

REQUIRED = ("x_train", "y_train", "x_test", "y_test")


def load_npz(cfg, input_kind: str) -> Dataset:
    try:
        with np.load(cfg.path, allow_pickle=False) as archive:
            arrays = {k: archive[k] for k in archive.files}
    except (OSError, ValueError) as error:
        raise DataError(f"{cfg.path}: not a readable .npz without pickles ({error})") from None
    missing = [k for k in REQUIRED if k not in arrays]
    if missing:
        raise DataError(
            f"{cfg.path}: missing arrays {missing}; an npz dataset has x_train, y_train, "
            f"x_test, y_test and optionally x_val, y_val (found {sorted(arrays)})"
        )
    for name in ("y_train", "y_val", "y_test"):  # indexed as in the file, before a validation split
        y = arrays.get(name)
        if y is not None and np.issubdtype(y.dtype, np.integer) and len(y) and y.max() >= MAX_CLASSES:
            row = int(np.argmax(y))
            raise DataError(
                f"{cfg.path}: {name}[{row}] is {y[row]}, past {MAX_CLASSES - 1:,}, the largest class id a "
                "zoo classifier takes; y arrays hold class indices 0..K-1"
            )
    if "x_val" not in arrays:
        rng = np.random.default_rng(cfg.split_seed)
        order = rng.permutation(len(arrays["y_train"]))
        n_val = round(cfg.val_fraction * len(order))
        val, train = np.sort(order[:n_val]), np.sort(order[n_val:])
        arrays["x_val"], arrays["y_val"] = arrays["x_train"][val], arrays["y_train"][val]
        arrays["x_train"], arrays["y_train"] = arrays["x_train"][train], arrays["y_train"][train]
    splits = {}
    for name in ("train", "val", "test"):
        x, y = arrays[f"x_{name}"], arrays[f"y_{name}"]
        if len(x) != len(y):
            raise DataError(f"{cfg.path}: x_{name} has {len(x)} samples but y_{name} has {len(y)}")
        if not np.issubdtype(y.dtype, np.integer) or (len(y) and y.min() < 0):
            raise DataError(f"{cfg.path}: y_{name} must hold class indices 0..K-1 (got {y.dtype})")
        x = np.ascontiguousarray(x, dtype=np.float32)
        if input_kind == "image":
            if x.ndim == 3:
                x = x[:, None]
            if x.ndim != 4 or x.shape[2] != x.shape[3]:
                raise DataError(
                    f"{cfg.path}: x_{name} has shape {x.shape}; images must be (N, H, W) or "
                    "(N, C, H, W) with H == W"
                )
        elif x.ndim != 3:
            raise DataError(f"{cfg.path}: x_{name} has shape {x.shape}; sequences must be (N, T, F)")
        splits[name] = Split(x, y.astype(np.int64))
    ys = [s.y for s in splits.values()]
    info = (
        image_info(splits["train"].x, ys) if input_kind == "image" else sequence_info(splits["train"].x, ys)
    )
    return Dataset(splits["train"], splits["val"], splits["test"], "classification", info)
