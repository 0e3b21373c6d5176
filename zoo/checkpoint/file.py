"""The file layer under the common checkpoint: safetensors bytes in and out, safely.

Kept apart from what a checkpoint *means* (zoo.checkpoint) because every writer of a
safetensors file in zoo (checkpoints, imported weights, Keras training states) needs the
same guarantees: a crash never leaves half a file where a good one was (temporary name,
fsync, rename), a killed writer's leftovers are cleaned up, new files get the user's umask,
a pickle is refused before anything reads it, and non-finite weights are named as a
diverged model rather than loaded into nonsense.
"""

from __future__ import annotations

import ctypes
import functools
import json
import math
import os
import sys
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from zoo.checkpoint.aligned import ALIGNMENT, aligned_empty, aligned_view, contiguous
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


def read_aligned(path: str | Path) -> dict[str, np.ndarray]:
    """A safetensors file's tensors, each read into its own aligned array (from the page
    cache: one copy, no map left behind). ``read_checkpoint`` has already checked the header;
    a file cut short since is refused here.

    The tensors are read by ``preadv``, one system call for up to ``IOV_MAX`` buffers, which
    holds the GIL only while the arrays are made: a load reads in a second thread while its
    main thread builds a Keras twin in Python, and a read call per tensor would wait for
    that thread's GIL (up to the 5 ms switch interval) each time."""
    with open(path, "rb", buffering=0) as handle:
        (length,) = np.frombuffer(handle.read(8), "<u8")
        header = parse_header(handle.read(int(length)), path)
        entries = sorted(
            (entry["data_offsets"], name, entry) for name, entry in header.items() if name != "__metadata__"
        )  # in file order, so that the buffers follow each other
        tensors, buffers, cursor = {}, [], 0
        for (begin, end), name, entry in entries:
            if begin != cursor:  # safetensors lays tensors end to end; this file changed since
                raise CheckpointError(f"{path}: {name} does not start where the tensor before it ends")
            dtype = SAFETENSORS_DTYPES[entry["dtype"]]
            if dtype == "bfloat16":
                import ml_dtypes

                dtype = ml_dtypes.bfloat16
            array = tensors[name] = aligned_empty(tuple(entry["shape"]), dtype)
            if array.size:
                buffers.append(memoryview(array.reshape(-1).view(np.uint8)))
            cursor = end
        _read_into(handle, buffers, 8 + int(length), path)
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


# ------------------------------------------------------------------------------ write

IO_THREADS = min(4, os.cpu_count() or 1)  # memory-bound copies and page-cache writes: a few saturate it
# Bytes a writing thread makes ready (copied where strided, checked finite) and writes at a time,
# each part handed to the disk as soon as it is in the page cache: small enough that the write
# reads what the copy and the check left in the cache, large enough that a call costs nothing
# (gpt2's Keras save, same-run median against the durable floor: 1.59x at 1 MB, 0.98x at 4 MB,
# 1.39x at 8 MB, one noisy run of 14 repetitions).
WRITE_PART = 1 << 20
# safetensors lays tensors out by its dtype enum, last member first, then by name (its ``prepare``).
SAFETENSORS_ORDER = (
    "BOOL", "U8", "I8", "I16", "U16", "F16", "BF16", "I32", "U32", "F32", "F64", "I64", "U64",
)  # fmt: skip
Layout = Mapping[str, tuple[tuple[int, ...], Any]]  # name -> (shape, dtype)


@dataclass(frozen=True)
class TensorStream:
    """Tensors whose names, shapes and dtypes are known before their values (a Keras twin's,
    from its weight table): the file is laid out from ``layout`` and each of ``arrays``
    (name, array of any strides) is written as soon as it comes, while the next is made."""

    layout: Layout
    arrays: Iterable[tuple[str, np.ndarray]]


def write_safetensors(
    path: str | Path,
    tensors: Mapping[str, np.ndarray] | TensorStream,
    metadata: dict[str, str],
    *,
    finite_source: str | Path | None = None,
    float_dtype: Any = None,
) -> Path:
    """Atomically write ``tensors``, laid out byte for byte as safetensors' ``save_file`` lays
    them out: temporary file, fsync, rename, fsync the folder.

    Each tensor is written at its offset by one of a few threads, ``WRITE_PART`` bytes at a
    time: straight from its memory where it is C-ordered, and through a small buffer of the
    thread's own where it is strided (a Keras kernel in torch's layout), so that the copy,
    the finite check and the write all find the part in the cache and no tensor is ever
    copied whole. Every part is handed to the disk as soon as it is in the page cache
    (``sync_file_range``), so the one fsync at the end waits for little more than the last
    part, where ``save_file`` and an fsync leave the disk idle until everything is written.
    (A whole-tensor copy on some threads and the writes on another, the previous design,
    took 1.2-2.3x as long on gpt2's and gpt2-medium's Keras twins, measured side by side:
    bench/RESULTS.md.)

    With ``finite_source``, a tensor holding NaN or inf is refused (:class:`NonFiniteTensors`,
    naming ``finite_source``) once all are checked, and nothing is replaced. ``float_dtype``
    is the dtype floating tensors are written in (a low-precision export), after that check.
    """
    if not all(isinstance(key, str) and isinstance(value, str) for key, value in metadata.items()):
        raise TypeError(f"safetensors metadata maps str to str, not {metadata!r}")
    stream = isinstance(tensors, TensorStream)
    layout = tensors.layout if stream else {name: (a.shape, a.dtype) for name, a in tensors.items()}
    cast = None if float_dtype is None else np.dtype(float_dtype)

    def stored(dtype: Any) -> np.dtype:
        floating = cast is not None and np.issubdtype(dtype, np.floating)
        return cast if floating else np.dtype(dtype)

    prefix, offsets = safetensors_header({n: (s, stored(d)) for n, (s, d) in layout.items()}, metadata)
    arrays = tensors.arrays if stream else ((name, tensors[name]) for name in offsets)  # file order
    bad, buffers = set(), threading.local()

    def write(name: str, array: np.ndarray) -> None:  # on a writing thread
        for part, start in _parts(array, buffers):  # little-endian, as the file is
            if finite_source is not None and name not in bad and not finite(part):
                bad.add(name)
            target = stored(part.dtype)
            _write_at(descriptor, part if part.dtype == target else part.astype(target),
                      offsets[name] + start * target.itemsize)  # fmt: skip

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_temporaries(path)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666)  # the umask decides
        try:
            _write_at(descriptor, np.frombuffer(prefix, np.uint8), 0)
            _write_all(layout, arrays, write)
            if finite_source is not None:
                refuse_nonfinite(finite_source, [name for name in layout if name in bad], len(layout))
            os.fsync(descriptor)
        finally:
            os.close(descriptor)
        os.replace(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)
    return path


def safetensors_header(layout: Layout, metadata: dict[str, str] | None) -> tuple[bytes, dict[str, int]]:
    """The bytes before the tensors as safetensors' own writer makes them (the header's
    length, then compact JSON padded with spaces to a multiple of 8 bytes), and where each
    tensor starts in the file, in file order. safetensors writes ``__metadata__``'s keys in
    a hash order that changes from run to run; here they keep the order they are given."""
    codes = {name: SAFETENSORS_CODES.get(np.dtype(dtype).name) for name, (_, dtype) in layout.items()}
    if unknown := [name for name, code in codes.items() if code is None]:
        raise ValueError(f"safetensors has no dtype for {some(unknown)}")
    entries: dict[str, Any] = {} if metadata is None else {"__metadata__": metadata}
    starts, end = {}, 0
    for name in sorted(layout, key=lambda n: (-SAFETENSORS_ORDER.index(codes[n]), n)):
        shape, dtype = layout[name]
        starts[name], end = end, end + math.prod(shape) * np.dtype(dtype).itemsize
        entries[name] = {
            "dtype": codes[name],
            "shape": [int(s) for s in shape],
            "data_offsets": [starts[name], end],
        }
    text = json.dumps(entries, ensure_ascii=False, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    return len(text).to_bytes(8, "little") + text, {name: 8 + len(text) + at for name, at in starts.items()}


def _write_all(
    layout: Layout, arrays: Iterable[tuple[str, np.ndarray]], write: Callable[[str, np.ndarray], None]
) -> None:
    """``write`` each of ``arrays`` on a few threads as they come, at most ``2 * IO_THREADS``
    given and not yet written (a stream's next tensors are read while earlier ones are
    written, and no further). Every name of ``layout`` exactly once, of its shape and dtype,
    or nothing is kept: a tensor never given would leave zeros in the file. A failure
    cancels what has not started."""
    expected, between = dict(layout), threading.BoundedSemaphore(2 * IO_THREADS)
    with ThreadPoolExecutor(IO_THREADS, thread_name_prefix="zoo-write") as pool:
        try:
            writes = []
            for name, array in arrays:
                shape, dtype = expected.pop(name, (None, None))
                if shape is None:
                    raise ValueError(f"{name}: not among the tensors laid out, or given twice")
                array = np.asarray(array)
                if array.shape != tuple(shape) or array.dtype != dtype:
                    found, laid_out = f"{array.dtype} {list(array.shape)}", f"{np.dtype(dtype)} {list(shape)}"
                    raise ValueError(f"{name}: {found}, laid out as {laid_out}")
                between.acquire()
                writes.append(pool.submit(write, name, array))
                writes[-1].add_done_callback(lambda _: between.release())
            if expected:
                raise ValueError(f"tensors laid out but never given: {some(list(expected))}")
            for done in writes:
                done.result()
        except BaseException:
            pool.shutdown(cancel_futures=True)
            raise


def _parts(array: np.ndarray, buffers: threading.local) -> Iterator[tuple[np.ndarray, int]]:
    """``array`` in C order as consecutive C-ordered little-endian parts of about ``WRITE_PART``
    bytes, each with the index of its first element: views of its memory where that is
    already so, else bands of its first axis copied into the thread's buffer (reused by the
    next part, so one part at a time)."""
    dtype = array.dtype.newbyteorder("<") if array.dtype.byteorder == ">" else array.dtype
    if array.flags.c_contiguous and dtype == array.dtype:
        flat, step = array.reshape(-1), max(1, WRITE_PART // max(dtype.itemsize, 1))
        for start in range(0, max(flat.size, 1), step):
            yield flat[start : start + step], start
        return
    if array.ndim == 0:
        yield np.ascontiguousarray(array, dtype), 0
        return
    row = math.prod(array.shape[1:])
    rows = max(1, WRITE_PART // max(row * dtype.itemsize, 1))
    memory = getattr(buffers, "memory", None)
    if memory is None or memory.nbytes < rows * row * dtype.itemsize + ALIGNMENT:
        memory = buffers.memory = np.empty(rows * row * dtype.itemsize + ALIGNMENT, np.uint8)
    for start in range(0, array.shape[0], rows):
        band = array[start : start + rows]
        yield contiguous(band, out=aligned_view(memory, band.shape, dtype)), start * row


def _write_at(descriptor: int, array: np.ndarray, offset: int) -> None:
    """A C-ordered ``array``'s bytes into the file at ``offset``, ``WRITE_PART`` bytes a call
    (short writes resumed), each part's writeback started at once."""
    start_writeback = _writeback_starter()
    data = memoryview(array.reshape(-1).view(np.uint8))
    while data.nbytes:
        written = os.pwrite(descriptor, data[:WRITE_PART], offset)
        if start_writeback is not None:
            start_writeback(descriptor, offset, written, SYNC_FILE_RANGE_WRITE)
        data, offset = data[written:], offset + written


SYNC_FILE_RANGE_WRITE = 2  # <fcntl.h>: start writing the range's dirty pages, do not wait


@functools.cache
def _writeback_starter() -> Callable[[int, int, int, int], int] | None:
    """Linux's ``sync_file_range``, which the os module does not wrap (ctypes releases the GIL
    during the call); None elsewhere, where the final fsync writes everything. It is a
    hint: an I/O error it meets is reported by that fsync."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        function = ctypes.CDLL(None, use_errno=True).sync_file_range
    except (AttributeError, OSError):
        return None
    function.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]
    function.restype = ctypes.c_int
    return function


def remove_stale_temporaries(path: Path) -> None:
    """Delete ``.<name>.<pid>.tmp`` files that a killed writer of ``path`` left behind; a
    temporary whose process still runs is another writer's and is left alone."""
    for temporary in path.parent.glob(f".{path.name}.*.tmp"):
        pid = temporary.name[len(path.name) + 2 : -len(".tmp")]
        if pid.isdigit() and int(pid) != os.getpid() and not _alive(int(pid)):
            temporary.unlink(missing_ok=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process
        return True
    return True
