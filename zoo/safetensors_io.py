"""The file layer under the common checkpoint: safetensors bytes in and out, safely.

Kept apart from what a checkpoint *means* (zoo.checkpoint) because every writer of a
safetensors file in zoo (checkpoints, imported weights, Keras training states) needs the
same guarantees: a crash never leaves half a file where a good one was (temporary name,
fsync, rename), a killed writer's leftovers are cleaned up, new files get the user's umask,
a pickle is refused before anything reads it, and non-finite weights are named as a
diverged model rather than loaded into nonsense.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np

SAFETENSORS_DTYPES = {
    "F64": "float64", "F32": "float32", "F16": "float16", "BF16": "bfloat16",
    "I64": "int64", "I32": "int32", "I16": "int16", "I8": "int8", "U8": "uint8", "BOOL": "bool",
}  # fmt: skip
LOW_PRECISION = ("bfloat16", "float16")


class CheckpointError(ValueError):
    """A file that is not a usable zoo checkpoint; the message names the file and the problem."""


class NonFiniteTensors(RuntimeError):
    """Weights that are not numbers (NaN or infinite): a diverged model, which would evaluate,
    fine-tune or convert into nonsense without a word. A failed run (exit 1), not a typo."""


def check_finite(source: str | Path, tensors: dict[str, Any]) -> None:
    """Refuse ``tensors`` (numpy arrays or torch tensors) where a floating one holds NaN or inf."""
    bad = [name for name, tensor in tensors.items() if not _finite(tensor)]
    if bad:
        raise NonFiniteTensors(
            f"{source}: {len(bad)} of {len(tensors)} tensors hold NaN or infinite values ({some(bad)}); "
            "the model diverged. Use a checkpoint from before (a run keeps its last finite state "
            "under state/) or train again with a lower optimizer.lr"
        )


def _finite(tensor: Any) -> bool:
    """A sum is NaN or infinite when any element is, and needs no temporary: the elementwise
    test runs only where the sum is not finite (NaN, inf, or a finite overflow)."""
    if hasattr(tensor, "is_floating_point"):  # torch: no copy to numpy
        return (
            not tensor.is_floating_point() or bool(tensor.sum().isfinite()) or bool(tensor.isfinite().all())
        )
    array = np.asarray(tensor)
    if not np.issubdtype(array.dtype, np.floating):
        return True
    return bool(np.isfinite(array.sum()) or np.isfinite(array).all())


def some(names: list[str], limit: int = 5) -> str:
    """A few names of a long list, and how many more: error messages stay one line."""
    shown = ", ".join(names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")


# ------------------------------------------------------------------------------- read


def read_aligned(path: str | Path) -> dict[str, np.ndarray]:
    """A safetensors file's tensors, each read into its own aligned array (``readinto`` from the
    page cache: one copy, no map left behind). ``read_checkpoint`` has already checked the
    header; a file cut short since is refused here."""
    from zoo.weights import aligned_empty

    with open(path, "rb", buffering=0) as handle:
        (length,) = np.frombuffer(handle.read(8), "<u8")
        header = json.loads(handle.read(int(length)))
        start = 8 + int(length)
        tensors = {}
        for name, entry in header.items():
            if name == "__metadata__":
                continue
            dtype = SAFETENSORS_DTYPES[entry["dtype"]]
            if dtype == "bfloat16":
                import ml_dtypes

                dtype = ml_dtypes.bfloat16
            array = aligned_empty(tuple(entry["shape"]), dtype)
            begin, end = entry["data_offsets"]
            handle.seek(start + begin)
            target = memoryview(array.reshape(-1).view(np.uint8)) if array.size else memoryview(b"")
            done = handle.readinto(target) if array.size else 0
            while done < end - begin:
                more = handle.readinto(target[done:])
                if not more:
                    raise CheckpointError(f"{path}: {name} is cut short; the file is truncated")
                done += more
            tensors[name] = array
    return tensors


def refuse_pickles(path: Path) -> None:
    """Name a pickled file for what it is before a safetensors reader fails on it obscurely."""
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


def write_safetensors(path: str | Path, tensors: dict[str, np.ndarray], metadata: dict[str, str]) -> Path:
    """Atomically write ``tensors``: temporary file, fsync, rename, fsync the folder."""
    from safetensors.numpy import save_file

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_temporaries(path)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        arrays = {k: np.require(v, requirements="C") for k, v in tensors.items()}  # keeps 0-d
        save_file(arrays, str(temporary), metadata=metadata)
        os.chmod(temporary, file_mode())  # safetensors creates 0600; the user's umask decides
        with open(temporary, "rb") as handle:
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)
    return path


def file_mode() -> int:
    """The mode a plain ``open(..., "w")`` would give a new file under the current umask."""
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


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
