"""The file layer under the common checkpoint: the safetensors format and reading it safely.

Kept apart from what a checkpoint *means* (zoo.checkpoint.metadata) because every reader of a
safetensors file in zoo (checkpoints, imported weights, Keras training states) needs the same
guarantees: a pickle is refused before anything reads it, a header that names a tensor twice is
refused, the tensors land in aligned memory of their own, and non-finite weights are named as a
diverged model rather than loaded into nonsense. Writing, atomically and durably, is
:mod:`zoo.checkpoint.writer`'s.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np

from zoo.checkpoint.aligned import aligned_empty
from zoo.limits import require_regular_file

SAFETENSORS_DTYPES = {
    "F64": "float64", "F32": "float32", "F16": "float16", "BF16": "bfloat16",
    "I64": "int64", "I32": "int32", "I16": "int16", "I8": "int8", "U64": "uint64", "U32": "uint32",
    "U16": "uint16", "U8": "uint8", "BOOL": "bool",
}  # fmt: skip
SAFETENSORS_CODES = {name: code for code, name in SAFETENSORS_DTYPES.items()}
LOW_PRECISION = ("bfloat16", "float16")


class CheckpointError(ValueError):
    """A file that is not a usable zoo checkpoint; the message names the file and the problem."""


class NonFiniteTensors(RuntimeError):
    """Weights that are not numbers (NaN or infinite): a diverged model, which would evaluate,
    fine-tune or convert into nonsense without a word. A failed run (exit 1), not a typo."""


def check_finite(source: str | Path, tensors: dict[str, Any]) -> None:
    """Refuse ``tensors`` (numpy arrays or torch tensors) where a floating one holds NaN or inf."""
    refuse_nonfinite(source, [name for name, tensor in tensors.items() if not finite(tensor)], len(tensors))


def refuse_nonfinite(source: str | Path, bad: list[str], total: int) -> None:
    """Raise :class:`NonFiniteTensors` naming ``bad``, the non-finite of ``total`` tensors, if any."""
    if bad:
        raise NonFiniteTensors(
            f"{source}: {len(bad)} of {total} tensors hold NaN or infinite values ({some(bad)}); "
            "the model diverged. Use a checkpoint from before (a run keeps its last finite state "
            "under state/) or train again with a lower optimizer.lr"
        )


def finite(tensor: Any) -> bool:
    """A sum of squares (float32/64: one BLAS dot product, ~2.5x numpy's sum where the tensor
    is in cache) or a sum is NaN or infinite when any element is, and needs no temporary:
    the elementwise test runs only where it is not finite (NaN, inf, or a finite overflow)."""
    if hasattr(tensor, "is_floating_point"):  # torch: no copy to numpy
        return (
            not tensor.is_floating_point() or bool(tensor.sum().isfinite()) or bool(tensor.isfinite().all())
        )
    array = np.asarray(tensor)
    if not np.issubdtype(array.dtype, np.floating):
        return True
    with np.errstate(over="ignore"):  # a sum of large finite weights may overflow: no warning, a test
        if array.dtype in (np.float32, np.float64) and array.flags.c_contiguous:
            flat = array.reshape(-1)
            return bool(np.isfinite(np.dot(flat, flat)) or np.isfinite(array).all())
        return bool(np.isfinite(array.sum()) or np.isfinite(array).all())


def as_float32(tensors: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """A bfloat16/float16 export's tensors as float32 (the weights' dtype in both twins);
    float32 and integer tensors as they are."""
    return {k: v.astype(np.float32) if v.dtype.name in LOW_PRECISION else v for k, v in tensors.items()}


def some(names: list[str], limit: int = 5) -> str:
    """A few names of a long list, and how many more: error messages stay one line."""
    shown = ", ".join(names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")


# ------------------------------------------------------------------------------- read


READ_CHUNK = 32 << 20  # bytes: a chunked read hands on its tensors about this often


def read_aligned(
    path: str | Path, arrived: Callable[[list[str], dict[str, np.ndarray]], None] | None = None
) -> dict[str, np.ndarray]:
    """A safetensors file's tensors, each read into its own aligned array (from the page
    cache: one copy, no map left behind). ``read_checkpoint`` has already checked the header;
    a file cut short since is refused here.

    The tensors are read by ``preadv``, one system call for up to ``IOV_MAX`` buffers, which
    holds the GIL only while the arrays are made: a load reads in a second thread while its
    main thread builds a Keras twin in Python, and a read call per tensor would wait for
    that thread's GIL (up to the 5 ms switch interval) each time. With ``arrived``, the file
    is read in chunks of about ``READ_CHUNK`` bytes, and ``arrived(names, tensors)`` is called
    once a chunk's tensors are in: work on them starts while the rest is read."""
    with open(path, "rb", buffering=0) as handle:
        (length,) = np.frombuffer(handle.read(8), "<u8")
        header = parse_header(handle.read(int(length)), path)
        entries = sorted(
            (entry["data_offsets"], name, entry) for name, entry in header.items() if name != "__metadata__"
        )  # in file order, so that the buffers follow each other
        tensors, chunks, cursor = {}, [([], [], 0)], 0
        for (begin, end), name, entry in entries:
            if begin != cursor:  # safetensors lays tensors end to end; this file changed since
                raise CheckpointError(f"{path}: {name} does not start where the tensor before it ends")
            dtype = SAFETENSORS_DTYPES[entry["dtype"]]
            if dtype == "bfloat16":
                dtype = ml_dtypes.bfloat16
            array = tensors[name] = aligned_empty(tuple(entry["shape"]), dtype)
            names, buffers, size = chunks[-1]
            names.append(name)
            if array.size:
                buffers.append(memoryview(array.reshape(-1).view(np.uint8)))
            chunks[-1] = (names, buffers, size + array.nbytes)
            if arrived is not None and chunks[-1][2] >= READ_CHUNK:
                chunks.append(([], [], 0))
            cursor = end
        offset = 8 + int(length)
        for names, buffers, size in chunks:
            _read_into(handle, buffers, offset, path)
            offset += size
            if arrived is not None and names:
                arrived(names, tensors)
    return tensors


def _read_into(handle, buffers: list[memoryview], offset: int, path: str | Path) -> None:
    """Fill ``buffers`` from ``offset`` on: ``preadv`` where the system has it (at most
    ``IOV_MAX`` buffers per call, short reads resumed), one ``readinto`` each otherwise."""
    preadv = getattr(os, "preadv", None)
    limit = getattr(os, "IOV_MAX", None) or 1024
    index = 0
    while index < len(buffers):
        if preadv is not None:
            done = preadv(handle.fileno(), buffers[index : index + limit], offset)
        else:
            handle.seek(offset)
            done = handle.readinto(buffers[index])
        if not done:
            raise CheckpointError(f"{path}: the file is cut short; it was truncated after it was checked")
        offset += done
        while index < len(buffers) and done >= buffers[index].nbytes:
            done -= buffers[index].nbytes
            index += 1
        if done:
            buffers[index] = buffers[index][done:]


def parse_header(text: bytes, path: str | Path) -> dict[str, Any]:
    """A safetensors JSON header, refused where it names a tensor (or a metadata key, or a field
    of an entry) twice: JSON leaves the meaning of a repeated name open, and safetensors and
    ``json.loads`` each keep one of the two without a word, so two readers of one file could
    see different weights."""
    pairs = json.loads(text, object_pairs_hook=_Pairs)
    if not isinstance(pairs, _Pairs):
        raise CheckpointError(f"{path}: its safetensors header is not a JSON object; the file is damaged")
    _refuse_repeats(path, pairs, "tensor")
    header = {}
    for name, entry in pairs:
        if isinstance(entry, _Pairs):
            _refuse_repeats(path, entry, "metadata key" if name == "__metadata__" else f"{name!r} field")
            entry = dict(entry)
        header[name] = entry
    return header


class _Pairs(list):
    """A JSON object's (name, value) pairs in file order, repeats kept: told apart from an array."""


def read_header(path: str | Path) -> dict[str, Any]:
    """The header of a safetensors file that the safetensors library has opened (which bounds
    its length), with names given twice refused (see :func:`parse_header`)."""
    require_regular_file(path, CheckpointError)
    with open(path, "rb") as handle:
        (length,) = np.frombuffer(handle.read(8), "<u8")
        return parse_header(handle.read(int(length)), path)


def _refuse_repeats(path: str | Path, pairs: list[tuple[str, Any]], what: str) -> None:
    seen: set[str] = set()
    for name, _ in pairs:
        if name in seen:
            raise CheckpointError(
                f"{path}: its safetensors header names the {what} {name!r} twice; the file is damaged "
                "(readers would disagree on which of the two it holds)"
            )
        seen.add(name)


def refuse_pickles(path: Path) -> None:
    """Name a pickled file for what it is before a safetensors reader fails on it obscurely."""
    require_regular_file(path, CheckpointError)
    with open(path, "rb") as handle:
        head = handle.read(9)
    # A safetensors file starts with an 8-byte header length and then "{": its first byte
    # may well be 0x80, so only a file that is not that is judged by the pickle/zip magic.
    if head[8:9] != b"{" and (head[:2] == b"PK" or head[:1] == b"\x80"):
        raise CheckpointError(
            f"{path}: looks like a pickled PyTorch file (torch.save / a .pt or .ckpt); zoo never "
            "unpickles files. If you trust it, load it yourself with torch.load(..., "
            "weights_only=True) into the torch twin and export it with zoo.save_checkpoint."
        )
