"""The common checkpoint: one safetensors file that either framework loads.

Tensor names and layouts are exactly the torch twin's ``state_dict``; the Keras twin
reaches them through its family's weight table. Metadata (all strings, as safetensors
requires) carries what is needed to rebuild and reuse the model. Files are written to a
temporary name, fsynced and renamed, so a crash never leaves half a file where a good
one was; nothing is ever unpickled.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from zoo import registry
from zoo.family import ArchitectureConfig, Family
from zoo.weights import keras_to_tensors, tensor_specs, tensors_to_keras

FORMAT = "zoo-checkpoint"
FORMAT_VERSION = 1
SAFETENSORS_DTYPES = {
    "F64": "float64", "F32": "float32", "F16": "float16", "BF16": "bfloat16",
    "I64": "int64", "I32": "int32", "I16": "int16", "I8": "int8", "U8": "uint8", "BOOL": "bool",
}  # fmt: skip


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
            f"{source}: {len(bad)} of {len(tensors)} tensors hold NaN or infinite values ({_some(bad)}); "
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


@dataclass(frozen=True)
class Checkpoint:
    path: Path
    metadata: dict[str, str]
    family: Family
    config: ArchitectureConfig

    @property
    def framework(self) -> str:
        return self.metadata.get("framework", "")

    def json(self, key: str, default: Any = None) -> Any:
        text = self.metadata.get(key)
        return default if text is None else json.loads(text)

    def tensors(self) -> dict[str, np.ndarray]:
        """Every tensor, as stored (float32 or the export dtype), checked finite."""
        from safetensors.numpy import load_file

        tensors = load_file(self.path)
        check_finite(self.path, tensors)
        return tensors

    def float32_tensors(self) -> dict[str, np.ndarray]:
        """Every tensor in float32 (integers as stored), each in 64-byte aligned memory of its
        own, read straight from the file with one copy: arrays a Keras load can hand over to
        TensorFlow as they are."""
        tensors = read_aligned(self.path)
        tensors = {
            k: v.astype(np.float32) if v.dtype.name in LOW_PRECISION else v for k, v in tensors.items()
        }
        check_finite(self.path, tensors)
        return tensors


LOW_PRECISION = ("bfloat16", "float16")


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


def framework_of(model: Any) -> str:
    torch, keras = sys.modules.get("torch"), sys.modules.get("keras")
    if torch is not None and isinstance(model, torch.nn.Module):
        return "lightning"
    if keras is not None and isinstance(model, keras.Model):
        return "keras"
    raise TypeError(f"{type(model).__name__} is neither a torch nn.Module nor a keras.Model of zoo")


def model_tensors(model: Any) -> dict[str, np.ndarray]:
    """A zoo twin's weights as canonical float32/int64 numpy arrays of their own (a snapshot)."""
    if framework_of(model) == "keras":
        return keras_to_tensors(model, _weight_table(model))
    return _torch_arrays(model, snapshot=True)


def _weight_table(model: Any):
    return registry.get_family(model.zoo_config.architecture).weight_table(model.zoo_config)


def _torch_arrays(model: Any, snapshot: bool) -> dict[str, np.ndarray]:
    """Canonical arrays of a torch twin; without ``snapshot``, views of CPU tensors' memory
    where the dtype already fits (a save writes them at once: a copy would only cost time)."""
    specs = tensor_specs(_weight_table(model))
    tensors = {}
    for name, value in model.state_dict().items():
        tensor = value.detach().to("cpu")
        if tensor.is_floating_point():
            tensor = tensor.float()
        array = tensor.numpy()
        dtype = specs[name].dtype if name in specs else array.dtype
        shared = value.device.type == "cpu" and tensor.data_ptr() == value.data_ptr()
        tensors[name] = array.astype(dtype, copy=snapshot and shared)
    return tensors


def save_checkpoint(
    model: Any,
    path: str | Path,
    *,
    recipe: dict[str, Any] | None = None,
    metrics: dict[str, float] | None = None,
    vocab: str | None = None,
    dtype: str = "float32",
) -> Path:
    """Export a zoo model (either twin) as the common checkpoint.

    ``vocab`` is a language model's characters in id order: without it the token ids
    of the checkpoint mean nothing, so it travels in the metadata.
    """
    framework = framework_of(model)
    if framework == "keras":  # views of the variables where the layout is shared: written at once
        tensors = keras_to_tensors(model, _weight_table(model), snapshot=False)
    else:
        tensors = _torch_arrays(model, snapshot=False)
    return write_checkpoint(
        path, model.zoo_config, tensors, framework=framework, recipe=recipe, metrics=metrics,
        vocab=vocab, dtype=dtype,
    )  # fmt: skip


def write_checkpoint(
    path: str | Path,
    config: ArchitectureConfig,
    tensors: dict[str, np.ndarray],
    *,
    framework: str,
    recipe: dict[str, Any] | None = None,
    metrics: dict[str, float] | None = None,
    vocab: str | None = None,
    dtype: str = "float32",
    source: dict[str, str] | None = None,
) -> Path:
    """Canonical tensors and the metadata that rebuilds their model, as one checkpoint file.

    ``framework`` is the twin that wrote the tensors, or ``"imported"`` with ``source``
    saying which foreign file and format they came from.
    """
    task_info = config.task_info() | ({"vocab": vocab} if vocab is not None else {})
    metadata = {
        "format": FORMAT,
        "format_version": str(FORMAT_VERSION),
        "architecture": config.architecture,
        "config": config.model_dump_json(),
        "task": config.active_task,
        "task_info": json.dumps(task_info),
        "framework": framework,
        "recipe": json.dumps(recipe or {}),
        "metrics": json.dumps(metrics or {}),
        "versions": json.dumps(_versions(framework)),
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "dtype": dtype,
    }
    if source is not None:
        metadata["source"] = json.dumps(source)
    check_finite(source["file"] if source and "file" in source else path, tensors)
    return write_safetensors(path, {k: _as_export_dtype(v, dtype) for k, v in tensors.items()}, metadata)


def _as_export_dtype(array: np.ndarray, dtype: str) -> np.ndarray:
    """Floating tensors in the export dtype (bfloat16 through ml_dtypes); integers as they are."""
    if not np.issubdtype(array.dtype, np.floating) or dtype == "float32":
        return array
    if dtype == "bfloat16":
        import ml_dtypes

        return array.astype(ml_dtypes.bfloat16)
    return array.astype(dtype)


def _versions(framework: str) -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    names = ["zoo", "safetensors", "numpy"]
    names += {"lightning": ["torch", "lightning"], "keras": ["tensorflow", "keras"]}.get(framework, [])
    found = {}
    for name in names:
        with contextlib.suppress(PackageNotFoundError):
            found[name] = version(name)
    return found


def load_tensors(model: Any, tensors: dict[str, np.ndarray]) -> None:
    """Put canonical tensors into a built twin of either framework."""
    config = model.zoo_config
    family = registry.get_family(config.architecture)
    # A bfloat16/float16 export goes back into float32 weights.
    tensors = {k: v.astype(np.float32) if v.dtype.name in LOW_PRECISION else v for k, v in tensors.items()}
    if framework_of(model) == "keras":
        tensors_to_keras(model, family.weight_table(config), tensors)
        return
    import torch

    model.load_state_dict({k: torch.from_numpy(np.asarray(v)) for k, v in tensors.items()}, strict=True)


# ------------------------------------------------------------------------------- read


def read_checkpoint(path: str | Path, architecture: str | None = None) -> Checkpoint:
    """Open and check a checkpoint: marker, architecture, config, every name, shape, dtype."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"{path}: no such file")
    _refuse_pickles(path)
    from safetensors import safe_open

    try:
        with safe_open(str(path), framework="np") as handle:
            metadata = handle.metadata() or {}
            found = {n: _describe_slice(handle.get_slice(n)) for n in handle.keys()}  # noqa: SIM118
    except Exception as error:  # safetensors raises its own error type or OSError
        raise CheckpointError(
            f"{path}: not a readable safetensors file ({error}); it may be truncated or of "
            "another format. zoo checkpoints are the model.safetensors files that `zoo train` exports."
        ) from None
    if metadata.get("format") != FORMAT:
        raise CheckpointError(
            f"{path}: a safetensors file, but not a zoo checkpoint (its metadata has no "
            f"format={FORMAT!r}); zoo needs the architecture and config that zoo writes there"
        )
    version = metadata.get("format_version", "0")
    if not version.isdigit():
        raise CheckpointError(f"{path}: format_version {version!r} is not a number; the file is damaged")
    if int(version) > FORMAT_VERSION:
        raise CheckpointError(
            f"{path}: checkpoint format version {metadata['format_version']} is newer than this "
            f"zoo reads ({FORMAT_VERSION}); upgrade zoo"
        )
    name = metadata.get("architecture", "")
    try:
        family = registry.get_family(name)
    except registry.UnknownArchitectureError as error:
        raise CheckpointError(f"{path}: {error}") from None
    if architecture is not None and registry.get_family(architecture).name != family.name:
        raise CheckpointError(
            f"{path}: is a {family.name!r} checkpoint, but a {registry.get_family(architecture).name!r} "
            "model was asked for"
        )
    try:
        config = family.config.model_validate_json(metadata.get("config", "{}"))
    except ValueError as error:
        raise CheckpointError(f"{path}: its {family.name} config does not validate: {error}") from None
    for key in ("task_info", "recipe", "metrics", "versions", "source"):
        try:
            value = json.loads(metadata.get(key, "{}"))
        except json.JSONDecodeError:
            raise CheckpointError(f"{path}: its {key} metadata is not JSON; the file is damaged") from None
        if not isinstance(value, dict):  # zoo writes an object in each; readers look names up in it
            raise CheckpointError(
                f"{path}: its {key} metadata is JSON {type(value).__name__}, not the object zoo writes; "
                "the file is damaged"
            )
    _check_tensors(path, found, family.weight_table(config), metadata.get("dtype", "float32"))
    return Checkpoint(path, metadata, family, config)


def _refuse_pickles(path: Path) -> None:
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


def _describe_slice(piece) -> tuple[tuple[int, ...], str]:
    dtype = piece.get_dtype()
    return tuple(piece.get_shape()), SAFETENSORS_DTYPES.get(dtype, dtype)


def _check_tensors(path: Path, found: dict[str, tuple], table, float_dtype: str) -> None:
    expected = tensor_specs(table)
    problems = []
    missing = [n for n in expected if n not in found]
    extra = [n for n in found if n not in expected]
    if missing:
        problems.append(f"missing tensors: {_some(missing)}")
    if extra:
        problems.append(f"unexpected tensors: {_some(extra)}")
    for name, spec in expected.items():
        if name not in found:
            continue
        shape, dtype = found[name]
        if shape != spec.shape:
            problems.append(f"{name} has shape {list(shape)}, the config needs {list(spec.shape)}")
        elif dtype != (expected := float_dtype if spec.dtype == "float32" else spec.dtype):
            problems.append(f"{name} has dtype {dtype}, expected {expected}")
    if problems:
        raise CheckpointError(f"{path}: tensors do not match the architecture: " + "; ".join(problems[:6]))


def _some(names: list[str], limit: int = 5) -> str:
    shown = ", ".join(names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")


# ------------------------------------------------------------------------------- load


def load_checkpoint(path: str | Path, framework: str = "lightning", architecture: str | None = None):
    """Build the twin of ``framework`` and load the checkpoint's weights into it."""
    from zoo.recipe import normalize_framework

    framework = normalize_framework(framework)
    if framework not in ("lightning", "keras"):
        raise ValueError(f"framework {framework!r} is not one of: lightning (torch), keras")
    checkpoint = read_checkpoint(path, architecture)
    if framework == "lightning":
        return _load_torch(checkpoint)
    return _load_keras(checkpoint)


def _load_keras(checkpoint: Checkpoint):
    """The Keras twin without computing the initial weights the checkpoint overwrites (see
    ``zoo.keras.skeleton``): ~2-3 s of TensorFlow random draws for gpt2. The tensors are read
    into aligned memory of their own and handed to the variables (no second copy where the
    layout is shared, one cache-blocked transpose where it is not). Where the build leaves a
    variable or a random draw that the checkpoint does not overwrite, the twin is built the
    ordinary way instead."""
    from zoo.keras import skeleton as keras_skeleton
    from zoo.weights import keras_layer

    family, config = checkpoint.family, checkpoint.config
    tensors = checkpoint.float32_tensors()
    table = family.weight_table(config)
    if keras_skeleton.available():
        with keras_skeleton.initialisers_skipped() as skipped:
            model = family.build_keras(config)
        filled = (keras_layer(keras_layer(model, p.layer), v) for p in table for v in p.variables)
        if skipped.covered_by(filled):
            tensors_to_keras(model, table, tensors, handed_over=True)
            return model
    model = family.build_keras(config)
    tensors_to_keras(model, table, tensors)
    return model


def _load_torch(checkpoint: Checkpoint):
    """The torch twin without its random initialisation, which is ~0.9 s for 100M parameters
    and all overwritten: built on the meta device (no memory, no arithmetic), then handed the
    checkpoint's tensors. Those are copied out of safetensors' memory map, so the model owns
    its memory (a file changed under a map kills the process). A twin that computes state in
    ``__init__`` that the checkpoint does not hold would keep it on the meta device, and
    tied weights would come apart: such a twin is built the ordinary way."""
    import torch
    from safetensors.torch import load_file

    family, config = checkpoint.family, checkpoint.config
    tensors = {
        name: tensor.to(torch.float32 if tensor.is_floating_point() else tensor.dtype, copy=True)
        for name, tensor in load_file(checkpoint.path).items()
    }  # float32 weights, whatever the export dtype
    check_finite(checkpoint.path, tensors)
    importlib.import_module(family.torch_model.partition(":")[0])  # module-level tensors stay real
    with torch.device("meta"):
        model = family.build_torch(config)
    tied = len(list(model.named_parameters(remove_duplicate=False))) != len(list(model.parameters()))
    if not tied:
        model.load_state_dict(tensors, strict=True, assign=True)
    if tied or meta_tensors(model):
        model = family.build_torch(config)
        model.load_state_dict(tensors, strict=True)
    return model


def meta_tensors(model) -> list[str]:
    """Where a torch model still holds meta tensors: parameters, buffers, plain attributes."""
    import torch

    found = [n for n, t in (*model.named_parameters(), *model.named_buffers()) if t.is_meta]
    for name, module in model.named_modules():
        for key, value in vars(module).items():
            values = value if isinstance(value, list | tuple) else [value]
            if any(isinstance(v, torch.Tensor) and v.is_meta for v in values):
                found.append(f"{name}.{key}")
    return found
