"""Arrays on 64-byte boundaries and cache-blocked copies into them: memory TensorFlow adopts
without a copy (zoo.checkpoint.tables) and a safetensors writer fills in place (zoo.checkpoint.file).

Below both of those modules, so neither imports the other for it.
"""

from __future__ import annotations

import math
import mmap

import numpy as np

ALIGNMENT = 64  # bytes: what Eigen's vectorised kernels want, and what TensorFlow allocates
# From this size on an array gets a mapping of its own, backed by huge pages where the kernel
# gives them on request (transparent_hugepage "madvise", the common default): the first write
# to fresh memory faults once per 2 MiB instead of once per 4 KiB. Reading a 498 MB checkpoint
# into fresh memory here: 0.4 GB/s in 4 KiB pages, 1.5-2.0 GB/s in huge pages.
HUGE_PAGES_FROM = 2 << 20


def aligned_empty(shape: tuple[int, ...], dtype) -> np.ndarray:
    """``np.empty`` on a 64-byte boundary, so that TensorFlow can adopt the memory as is; a
    large one in a mapping of its own that asks for huge pages (``HUGE_PAGES_FROM``), page
    aligned and exactly its size, freed with the array."""
    dtype = np.dtype(dtype)
    size = math.prod(shape) * dtype.itemsize
    if size >= HUGE_PAGES_FROM and hasattr(mmap, "MADV_HUGEPAGE"):
        mapping = mmap.mmap(-1, size)
        mapping.madvise(mmap.MADV_HUGEPAGE)
        return np.frombuffer(mapping, np.uint8, count=size).view(dtype).reshape(shape)
    return aligned_view(np.empty(size + ALIGNMENT, np.uint8), shape, dtype)


def aligned_view(raw: np.ndarray, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """An array of ``shape`` and ``dtype`` at the first 64-byte boundary of the bytes ``raw``."""
    size = math.prod(shape) * dtype.itemsize
    start = -raw.ctypes.data % ALIGNMENT
    return raw[start : start + size].view(dtype).reshape(shape)


def contiguous(array: np.ndarray, rows: int | None = None, out: np.ndarray | None = None) -> np.ndarray:
    """A C-ordered copy of ``array``, 64-byte aligned. A transposed matrix (the usual case: a
    kernel between torch's (out, in) and Keras' (in, out)), or a band of one's rows, is copied
    in bands of ``rows`` source rows, which keeps both sides in cache: ~3x numpy's
    element-strided copy.

    Each destination row takes one element from every source row of the band, ``rows``
    cache lines one source row apart. Where that distance is a multiple of 4 KiB they all
    fall in one set of the L1 cache (8 ways here) and evict each other: bands of 12 then,
    32 otherwise (on this machine's 2-core EPYC, source (768, 3072): 1.3 -> 2.5 GB/s; (4096,
    1024): 1.1 -> 2.5; (768, 2304), 3 KiB apart: 4.0 with 32, 3.9 with 12). Into ``out``
    where given (aligned memory of the same shape and dtype)."""
    out = aligned_empty(array.shape, array.dtype) if out is None else out
    if array.ndim == 2 and array.strides[0] == array.itemsize and array.shape[1] > 1:
        source = array.T  # rows in order in memory: each band of them is a column band of ``out``
        if rows is None:
            rows = 12 if source.strides[0] % 4096 == 0 else 32
        for start in range(0, source.shape[0], rows):
            out[:, start : start + rows] = source[start : start + rows].T
    else:
        out[...] = array
    return out
