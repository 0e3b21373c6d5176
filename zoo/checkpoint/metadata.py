"""The common checkpoint: one safetensors file that either framework loads.

Tensor names and layouts are exactly the torch twin's ``state_dict``; the Keras twin
reaches them through its family's weight table. Metadata (all strings, as safetensors
requires) carries what is needed to rebuild and reuse the model. This module is what a
checkpoint *means* (its metadata, and what is checked before anything is loaded); the bytes
are :mod:`zoo.checkpoint.file`'s (atomic writes, no pickles) and a twin's tensors
:mod:`zoo.checkpoint.tensors`'.
Saving a twin and loading one (which need its framework's backend) are zoo.backend's.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.metadata
import json
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
from pydantic import ValidationError
from safetensors import safe_open
from safetensors.numpy import load_file

from zoo import registry
from zoo.checkpoint.file import (
    LOW_PRECISION,
    SAFETENSORS_DTYPES,
    CheckpointError,
    as_float32,
    check_finite,
    read_aligned,
    read_header,
    refuse_pickles,
    some,
)
from zoo.checkpoint.quantized import SCALE, Scheme, canonical_view, dequantize_tensors, read_scheme
from zoo.checkpoint.tables import tensor_specs
from zoo.checkpoint.writer import TensorStream, write_safetensors
from zoo.family import ArchitectureConfig, Family
from zoo.limits import parse_json, require_regular_file
from zoo.preprocessing import NewerPreprocessing, Preprocessing, PreprocessingError, parse_preprocessing

FORMAT = "zoo-checkpoint"
FORMAT_VERSION = 1
# The metadata keys in the order write_checkpoint writes them: safetensors hands metadata back in
# a different order in every process, so anything that shows it puts it in this one.
METADATA_ORDER = (
    "format", "format_version", "architecture", "config", "task", "task_info", "framework", "recipe",
    "metrics", "versions", "created", "dtype", "quantization", "source", "preprocessing",
)  # fmt: skip
FLOAT_DTYPES = ("float32", *LOW_PRECISION, "float64")  # the dtypes a checkpoint's weights may have


@dataclass(frozen=True)
class Checkpoint:
    path: Path
    metadata: dict[str, str]
    family: Family
    config: ArchitectureConfig
    quantization: Scheme | None = None  # a quantized checkpoint's scheme (zoo.checkpoint.quantized)

    @property
    def framework(self) -> str:
        return self.metadata.get("framework", "")

    def json(self, key: str, default: Any = None) -> Any:
        text = self.metadata.get(key)
        return default if text is None else json.loads(text)

    @property
    def preprocessing(self) -> Preprocessing | None:
        """What its inputs went through (zoo.preprocessing), or None where it records none
        (checkpoints written before the record existed, a model saved by hand). One of a newer
        version than this zoo reads is refused here, not when the file is opened: its weights
        load all the same."""
        text = self.metadata.get("preprocessing")
        if text is None:
            return None
        try:
            return parse_preprocessing(text, f"{self.path}: its preprocessing metadata")
        except PreprocessingError as error:
            raise CheckpointError(str(error)) from None

    def tensors(self) -> dict[str, np.ndarray]:
        """Every tensor, as stored (float32 or the export dtype; a quantized one as the float32
        weight its integers and scales stand for), checked finite."""
        tensors = load_file(self.path)
        check_finite(self.path, tensors)
        return self._dequantized(tensors)

    def float32_tensors(self) -> dict[str, np.ndarray]:
        """Every tensor in float32 (integers as stored), each in 64-byte aligned memory of its
        own, read straight from the file with one copy: arrays a Keras load can hand over to
        TensorFlow as they are."""
        tensors = as_float32(read_aligned(self.path))
        check_finite(self.path, tensors)
        return self._dequantized(tensors)

    def stored_integers(self) -> dict[str, np.ndarray]:
        """A quantized checkpoint's integers and their scales as stored (``NAME``, ``NAME.scale``):
        what a twin holds in place of the float weights (zoo.nn.{torch,keras}.quantized)."""
        with safe_open(self.path, "numpy") as opened:
            held = [n.removesuffix(SCALE) for n in opened.keys() if n.endswith(SCALE)]  # noqa: SIM118
            return {n: opened.get_tensor(n) for name in held for n in (name, name + SCALE)}

    def _dequantized(self, tensors: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        if self.quantization is None:
            return tensors
        specs = tensor_specs(self.family.weight_table(self.config))
        shapes = {name: spec.shape for name, spec in specs.items()}
        return dequantize_tensors(tensors, self.quantization, shapes)


# ------------------------------------------------------------------------------ write


def write_checkpoint(
    path: str | Path,
    config: ArchitectureConfig,
    tensors: dict[str, np.ndarray] | TensorStream,
    *,
    framework: str,
    recipe: dict[str, Any] | None = None,
    metrics: dict[str, float] | None = None,
    vocab: str | None = None,
    dtype: str = "float32",
    source: dict[str, str] | None = None,
    preprocessing: Preprocessing | None = None,
    packages: tuple[str, ...] = (),
    quantization: Scheme | None = None,
) -> Path:
    """Canonical tensors and the metadata that rebuilds their model, as one checkpoint file.

    ``framework`` is the twin that wrote the tensors, or ``"imported"`` with ``source``
    saying which foreign file and format they came from. Non-finite tensors are refused
    (named after ``source``'s file, or ``path``) and the file is left as it was. ``packages``
    are the writing framework's libraries (its backend's, :func:`zoo.backend.save_checkpoint`
    passes them), whose versions the file records beside zoo's own. ``preprocessing`` is
    what the model's inputs went through (zoo.preprocessing), recorded for whoever uses it.
    ``quantization`` is the scheme of ``tensors`` stored quantized (zoo.checkpoint.quantized).
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
        "versions": _versions(packages),
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "dtype": dtype,
    }
    if source is not None:
        metadata["source"] = json.dumps(source)
    if quantization is not None:
        metadata["quantization"] = quantization.model_dump_json(exclude_none=True)
    if preprocessing is not None:
        _check_labels(path, preprocessing, config)
        metadata["preprocessing"] = preprocessing.to_json()
    checked = source["file"] if source and "file" in source else path
    return write_safetensors(path, tensors, metadata, finite_source=checked, float_dtype=_export_dtype(dtype))


def _export_dtype(dtype: str) -> Any:
    """The dtype floating tensors are written in (bfloat16 through ml_dtypes); None for
    float32, the weights' own, which are then written as they are."""
    if dtype == "float32":
        return None
    if dtype == "bfloat16":
        return ml_dtypes.bfloat16
    return np.dtype(dtype)


@functools.cache
def _versions(packages: tuple[str, ...]) -> str:
    """The libraries that made the file (zoo's own, and the writing backend's; none for an
    import), as JSON. Read once per process: the package metadata lookups take 10 ms a save."""
    found = {}
    for name in ["zoo", "safetensors", "numpy", *packages]:
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            found[name] = importlib.metadata.version(name)
    return json.dumps(found)


# ------------------------------------------------------------------------------- read


def read_checkpoint(path: str | Path, architecture: str | None = None) -> Checkpoint:
    """Open and check a checkpoint: marker, architecture, config, every name, shape, dtype."""
    path = Path(path)
    metadata, found = _opened(path)
    _check_format(path, metadata)
    family = _family(path, metadata, architecture)
    config = _config(path, family, metadata)
    for key in ("task_info", "recipe", "metrics", "versions", "source", "preprocessing"):  # objects
        source = f"{path}: its {key} metadata"
        parse_json(metadata.get(key, "{}"), source, error=CheckpointError, fix="the file is damaged")
    _check_task(path, metadata, config)
    _check_preprocessing(path, metadata, config)
    dtype = metadata.get("dtype", "float32")
    table = family.weight_table(config)
    scheme = None
    if "quantization" in metadata:  # integers and scales stand for the weights the table names
        scheme = read_scheme(metadata["quantization"], str(path))
        shapes = {name: spec.shape for name, spec in tensor_specs(table).items()}
        weights = dtype if dtype in FLOAT_DTYPES else "float32"
        found = canonical_view(found, shapes, scheme, weights, str(path))
    _check_tensors(path, found, table, dtype)
    if dtype not in FLOAT_DTYPES:  # its tensors are float32, else _check_tensors named one
        raise CheckpointError(
            f"{path}: its dtype metadata {dtype!r:.40} is not a weight dtype zoo writes (one of "
            f"{', '.join(FLOAT_DTYPES)}); its weights are float32, so the file is damaged: export it "
            "again, or write dtype=float32 in its metadata"
        )
    return Checkpoint(path, metadata, family, config, scheme)


def _opened(path: Path) -> tuple[dict[str, str], dict[str, tuple[tuple[int, ...], str]]]:
    """A safetensors file's metadata and its tensors' shapes and dtypes, read without the
    tensors: a FIFO, a missing file, a pickle, a file safetensors cannot open and a header
    naming a tensor twice are each refused in one line."""
    require_regular_file(path, CheckpointError)
    if not path.is_file():
        raise CheckpointError(f"{path}: no such file")
    refuse_pickles(path)
    try:
        with safe_open(str(path), framework="np") as handle:
            metadata = handle.metadata() or {}
            found = {n: _describe_slice(handle.get_slice(n)) for n in handle.keys()}  # noqa: SIM118
    except Exception as error:  # safetensors raises its own error type or OSError
        raise CheckpointError(
            f"{path}: not a readable safetensors file ({error}); it may be truncated or of "
            "another format. zoo checkpoints are the model.safetensors files that `zoo train` exports."
        ) from None
    read_header(path)  # a tensor named twice, which safetensors reads as one of the two
    return metadata, found


def _check_format(path: Path, metadata: dict[str, str]) -> None:
    """zoo's marker, and a format version this zoo reads."""
    if metadata.get("format") != FORMAT:
        raise CheckpointError(
            f"{path}: a safetensors file, but not a zoo checkpoint (its metadata has no "
            f"format={FORMAT!r}); zoo needs the architecture and config that zoo writes there"
        )
    version = metadata.get("format_version", "0")
    if not re.fullmatch("[0-9]{1,9}", version):  # str.isdigit() is true of "²", int() fails on it
        raise CheckpointError(
            f"{path}: format_version {version!r:.24} is not a number zoo writes (1 to 9 digits 0-9); "
            "the file is damaged"
        )
    if int(version) > FORMAT_VERSION:
        raise CheckpointError(
            f"{path}: checkpoint format version {metadata['format_version']} is newer than this "
            f"zoo reads ({FORMAT_VERSION}); upgrade zoo"
        )


def _family(path: Path, metadata: dict[str, str], architecture: str | None) -> Family:
    """The family the ``architecture`` metadata names, which must be the one asked for, if any."""
    try:
        family = registry.get_family(metadata.get("architecture", ""))
    except registry.UnknownArchitectureError as error:
        raise CheckpointError(f"{path}: {error}") from None
    if architecture is not None and registry.get_family(architecture).name != family.name:
        raise CheckpointError(
            f"{path}: is a {family.name!r} checkpoint, but a {registry.get_family(architecture).name!r} "
            "model was asked for"
        )
    return family


def _config(path: Path, family: Family, metadata: dict[str, str]) -> ArchitectureConfig:
    """The ``config`` metadata as the config of the family the ``architecture`` metadata names,
    refused in one line naming the metadata field: a config of another family (the two fields
    disagree), or a field that does not validate (the first few, with pydantic's words)."""
    source = f"{path}: its config metadata"
    raw = parse_json(metadata.get("config", "{}"), source, error=CheckpointError, fix="the file is damaged")
    stated = raw.get("architecture")
    if isinstance(stated, str) and stated != family.name:
        try:
            other = registry.get_family(stated).name
        except registry.UnknownArchitectureError:
            other = stated
        if other != family.name:
            raise CheckpointError(
                f"{path}: its architecture metadata is {metadata.get('architecture')!r:.60} but its config "
                f"metadata is a {other!r:.60} config; the file is damaged (its metadata contradicts itself)"
            )
    try:
        return family.config.model_validate(raw)
    except ValidationError as error:
        problems = [_field_problem(e) for e in error.errors()]
        more = f" (and {len(problems) - 3} more)" if len(problems) > 3 else ""
        raise CheckpointError(
            f"{path}: its {family.name} config does not validate: {'; '.join(problems[:3])}{more}; "
            "its config metadata is damaged"
        ) from None
    except ValueError as error:  # a config's own check, raised outside pydantic's validation
        raise CheckpointError(f"{path}: its {family.name} config does not validate: {error}") from None


def _field_problem(error: Any) -> str:
    """One pydantic error as ``config.field: message`` (no input echo, no documentation URL)."""
    where = ".".join(str(part) for part in error.get("loc", ())) or "config"
    message = str(error.get("msg", "invalid")).removeprefix("Value error, ")
    return f"config.{where}: {message}" if where != "config" else f"config: {message}"


def _check_task(path: Path, metadata: dict[str, str], config: ArchitectureConfig) -> None:
    """The task and task_info metadata against the config, which is what the model is built
    from: a file that says one thing and builds another is damaged, and would be shown as one
    task and evaluated as the other."""
    task = metadata.get("task")
    if task is not None and task != config.active_task:
        raise CheckpointError(
            f"{path}: its task metadata is {task!r} but its {config.architecture} config builds a "
            f"{config.active_task!r} model; the file is damaged (its metadata contradicts itself)"
        )
    recorded = json.loads(metadata.get("task_info", "{}"))
    differ = [
        f"task_info.{key} is {recorded[key]!r}, the config's {key} {value!r}"
        for key, value in config.task_info().items()
        if key in recorded and recorded[key] != value
    ]
    if differ:
        raise CheckpointError(
            f"{path}: its metadata contradicts itself: {'; '.join(differ)}; the file is damaged"
        )


def _check_preprocessing(path: Path, metadata: dict[str, str], config: ArchitectureConfig) -> None:
    """The preprocessing record, where there is one of a version this zoo reads: valid, and
    naming as many labels as the model has classes. A newer one is left for its users to refuse
    (:attr:`Checkpoint.preprocessing`): the weights load all the same."""
    text = metadata.get("preprocessing")
    if text is None:
        return
    try:
        preprocessing = parse_preprocessing(text, f"{path}: its preprocessing metadata")
    except NewerPreprocessing:
        return
    except PreprocessingError as error:
        raise CheckpointError(f"{error}; the file is damaged") from None
    _check_labels(path, preprocessing, config)


def _check_labels(path: Path | str, preprocessing: Preprocessing, config: ArchitectureConfig) -> None:
    classes = getattr(config, "num_classes", None) if config.active_task.endswith("classification") else None
    labels = preprocessing.labels
    if labels is not None and len(labels) != classes:
        has = f"{classes} classes" if classes is not None else f"no classes (task {config.active_task})"
        raise CheckpointError(
            f"{path}: its preprocessing names {len(labels)} labels but the model has {has}; the labels "
            "belong to another model"
        )


def _describe_slice(piece) -> tuple[tuple[int, ...], str]:
    dtype = piece.get_dtype()
    return tuple(piece.get_shape()), SAFETENSORS_DTYPES.get(dtype, dtype)


def _check_tensors(path: Path, found: dict[str, tuple], table, float_dtype: str) -> None:
    """Every tensor the weight table names, at its shape and dtype: a weight in the export
    dtype the metadata names (a floating one: integer or bool weights are no export of zoo's,
    and neither twin trains or runs them), a counter in the table's own integer dtype."""
    expected = tensor_specs(table)
    if float_dtype not in FLOAT_DTYPES:
        float_dtype = "float32"  # the weights are then named with the dtype they should have
    problems = []
    missing = [n for n in expected if n not in found]
    extra = [n for n in found if n not in expected]
    if missing:
        problems.append(f"missing tensors: {some(missing)}")
    if extra:
        problems.append(f"unexpected tensors: {some(extra)}")
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
