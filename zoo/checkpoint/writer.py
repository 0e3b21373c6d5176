"""The safetensors writer under every zoo checkpoint and export: atomic and durable.

A crash never leaves half a file where a good one was (temporary name, fsync, rename, fsync of
the folder), a killed writer's leftovers are cleaned up, new files get the user's umask, and the
bytes are laid out exactly as safetensors' own ``save_file`` lays them out. Reading the format
(and refusing what must not be read) is :mod:`zoo.checkpoint.file`'s.
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

from zoo.checkpoint.aligned import ALIGNMENT, aligned_view, contiguous
from zoo.checkpoint.file import SAFETENSORS_CODES, finite, refuse_nonfinite, some

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

    def fill(descriptor: int) -> None:
        def write(name: str, array: np.ndarray) -> None:  # on a writing thread
            for part, start in _parts(array, buffers):  # little-endian, as the file is
                if finite_source is not None and name not in bad and not finite(part):
                    bad.add(name)
                target = stored(part.dtype)
                _write_at(descriptor, part if part.dtype == target else part.astype(target),
                          offsets[name] + start * target.itemsize)  # fmt: skip

        _write_at(descriptor, np.frombuffer(prefix, np.uint8), 0)
        _write_all(layout, arrays, write)
        if finite_source is not None:
            refuse_nonfinite(finite_source, [name for name in layout if name in bad], len(layout))

    return _replace_durably(Path(path), fill)


def _replace_durably(path: Path, fill: Callable[[int], None]) -> Path:
    """``path`` replaced by the file ``fill`` writes through the descriptor it is given: a
    temporary of this process's own, fsynced, renamed over ``path``, then the folder fsynced,
    so a crash leaves the old file or the new one, never half of one. Where ``fill`` raises,
    ``path`` is left as it was and the temporary removed."""
    path.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_temporaries(path)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666)  # the umask decides
        try:
            fill(descriptor)
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
