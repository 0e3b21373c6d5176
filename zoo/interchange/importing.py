"""``zoo import``: a torchvision / timm / transformers file or folder -> a zoo checkpoint, read
by the first registered format that places every tensor, with the tokenizer and preprocessing
the folder carries. A folder compressed-tensors quantized int8 / int4 becomes a quantized zoo
checkpoint holding the file's integers and scales (zoo.interchange.compressed_tensors).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from zoo import registry
from zoo.checkpoint.foreign import ForeignFormat, ForeignLayoutError, Tensors
from zoo.checkpoint.metadata import read_checkpoint, write_checkpoint
from zoo.checkpoint.quantized import SCALE, Scheme
from zoo.checkpoint.tables import tensor_specs
from zoo.family import Family
from zoo.interchange import InterchangeError
from zoo.interchange.compressed_tensors import Held, stored
from zoo.interchange.foreign_files import TORCH_SUFFIXES, directory_weights, read_foreign_held
from zoo.interchange.inputs import import_inputs
from zoo.interchange.tokenizer_io import save_tokenizer, source_tokenizer
from zoo.limits import read_json
from zoo.overwrite import refuse_inputs_as_outputs
from zoo.peak_memory import check_memory, import_estimate
from zoo.preprocessing import Preprocessing, PreprocessingError, TextPreprocessing
from zoo.tokenizer import TOKENIZER_CONFIG, TOKENIZER_FILE


@dataclass(frozen=True)
class Imported:
    """What ``zoo import`` wrote: the checkpoint, the family and format that read the weights,
    the config they make, their tensor count, and the tokenizer saved beside the checkpoint."""

    path: Path
    family: Family
    format: ForeignFormat
    config: Any
    tensors: int
    tokenizer: Path | None = None  # the source directory's tokenizer, saved next to the checkpoint
    quantization: Scheme | None = None  # a quantized folder's scheme, kept (compressed-tensors)
    integers: int = 0  # how many weights the checkpoint holds as the file's integers
    left_float: tuple[str, ...] = ()  # quantized in the file, placed off zoo's rows: float32, as exact


def import_checkpoint(
    src: str | Path,
    out: str | Path,
    *,
    format: str | None = None,
    architecture: str | None = None,
    num_heads: int | None = None,
    overwrite: bool = False,
) -> Imported:
    """A torchvision / timm / transformers file or directory -> a zoo checkpoint at ``out``.

    Every registered family's formats (or only ``format``, only ``architecture``'s) are
    tried; the first that places every tensor wins. ``architecture`` may be a preset name:
    then the weights must be that preset (resnet50 weights are not a resnet18). ``num_heads``
    is the attention head count of weights whose ``config.json`` does not say it (no shape
    shows it, and zoo does not guess). The ``config.json`` read is kept in the checkpoint's
    ``source`` metadata, so that an export to the same layout writes back what zoo's config
    does not model.
    """
    src, target = Path(src), _target(out)
    beside = [target.parent / TOKENIZER_FILE, target.parent / TOKENIZER_CONFIG]
    refuse_inputs_as_outputs([target, *beside], import_inputs(src), InterchangeError)
    if target.exists() and not overwrite:
        raise InterchangeError(f"{target}: already exists; choose another --out or pass --overwrite")
    if src.exists():  # else read_foreign says so
        weights = directory_weights(src) if src.is_dir() else [src]
        estimate = import_estimate(weights, TORCH_SUFFIXES, _expansion(src))
        check_memory(estimate, ["free some memory, or import on a larger machine"])
    tensors, meta, found = read_foreign_held(src)
    candidates = _candidates(format, architecture)
    failures: list[tuple[Family, ForeignFormat, ForeignLayoutError]] = []
    for family, fmt in candidates:
        try:
            fields, canonical = fmt.read(tensors, meta, num_heads)
        except ForeignLayoutError as error:
            failures.append((family, fmt, error))
            continue
        config = _config(family, fields, architecture, src, fmt)
        _check_placed(family, config, canonical, fmt)
        tokenizer = source_tokenizer(src, config)  # checked before anything is written
        preprocessing = _source_preprocessing(src, fmt, config, meta, tokenizer)
        source = {"file": str(src.resolve()), "format": fmt.name} | ({"config": meta} if meta else {})
        left: list[str] = []
        if found is not None:  # the file's integers, found again in the placed weights
            place = partial(fmt.read, meta=meta, num_heads=num_heads)
            canonical, left = stored(place, tensors, canonical, found)
        path = _write(target, config, canonical, found, source, preprocessing)
        saved = save_tokenizer(tokenizer, src, path.parent) if tokenizer is not None else None
        integers = sum(name.endswith(SCALE) for name in canonical)
        return Imported(
            path, family, fmt, config, len(canonical) - integers, saved,
            found.scheme if found else None, integers, tuple(left),
        )  # fmt: skip
    raise InterchangeError(_nothing_fits(src, tensors, failures))


def _expansion(src: Path) -> float:
    """Float32 bytes a stored byte becomes, at most: 8 in a quantized folder (int4's half byte)."""
    config = src / "config.json"
    if not config.is_file():
        return 1.0
    meta = read_json(config, error=InterchangeError, fix="it should be transformers' config.json")
    return 8.0 if isinstance(meta, dict) and meta.get("quantization_config") else 1.0


def _write(target: Path, config, tensors: Tensors, found: Held | None, source: dict, preprocessing) -> Path:
    """The checkpoint; a quantized folder's holds its integers and scales (``tensors``) and the
    scheme, and is read back, as ``zoo quantize``'s is."""
    if found is not None:
        source = {**source, "quantization_config": found.config}
    path = write_checkpoint(
        target, config, tensors, framework="imported", source=source, preprocessing=preprocessing,
        quantization=found.scheme if found else None,
    )  # fmt: skip
    if found is not None:
        read_checkpoint(path)  # what was written is a checkpoint zoo reads, or the import fails here
    return path


def _source_preprocessing(src: Path, fmt: ForeignFormat, config, meta: dict[str, Any], tokenizer):
    """What the foreign files say the inputs went through (the format's reading of its config:
    timm's pretrained_cfg, transformers' id2label, torchvision's eval transform), with the
    tokenizer imported beside the checkpoint; checked against the model it is recorded for."""
    try:
        found = fmt.read_preprocessing(config, meta)
    except PreprocessingError as error:
        raise InterchangeError(f"{src}: {error}") from None
    if tokenizer is not None:
        text = TextPreprocessing(tokenizer="tokenizer.json", fingerprint=tokenizer.fingerprint())
        found = (
            found.replace(text=text)
            if found
            else Preprocessing(source=f"{fmt.name} tokenizer files", text=text)
        )
    image = found.image if found is not None else None
    if image is not None and (image.channel_count, image.size, image.size) != config.sample_shape():
        raise InterchangeError(
            f"{src}: its config says images are {image.channel_count} x {image.size} x {image.size} "
            f"but the weights read {' x '.join(map(str, config.sample_shape()))}"
        )
    return found


def _target(out: str | Path) -> Path:
    out = Path(out)
    return out if out.suffix == ".safetensors" else out / "model.safetensors"


def _candidates(format: str | None, architecture: str | None) -> list[tuple[Family, ForeignFormat]]:
    families = list(registry.families().values())
    if architecture:
        families = [registry.families()[registry.get_family(architecture).name]]
    found = [(f, fmt) for f in families for fmt in f.formats if format in (None, fmt.name)]
    if not found:
        known = sorted({fmt.name for f in families for fmt in f.formats})
        scope = f"the {families[0].name!r} family" if architecture else "any registered family"
        raise InterchangeError(
            f"{scope} has no weight format {format!r}; known: {', '.join(known) or 'none'}"
            if format
            else f"{scope} reads no foreign weight format"
        )
    return found


def _config(family: Family, fields: dict[str, Any], architecture: str | None, src: Path, fmt):
    try:
        config = family.config.model_validate({**fields, "architecture": family.name})
    except ValueError as error:
        raise InterchangeError(
            f"{src}: {fmt.name} weights read as an invalid {family.name} config: {error}"
        ) from None
    if architecture and architecture in registry.presets():
        preset = registry.resolve_config(architecture)
        differ = [
            k for k in preset.model_fields if k != "preset" and getattr(preset, k) != getattr(config, k)
        ]
        differ = [k for k in differ if k not in family.config.DATA_FIELDS]
        if differ:
            raise InterchangeError(
                f"{src}: these {fmt.name} weights are not the preset {architecture!r}: "
                + ", ".join(f"{k} is {getattr(config, k)!r}, not {getattr(preset, k)!r}" for k in differ)
            )
        config = config.model_copy(update={"preset": architecture})
    return config


def _check_placed(family: Family, config, tensors: Tensors, fmt: ForeignFormat) -> None:
    """A format's output against the family's own table: a mismatch is a bug in the format."""
    specs = tensor_specs(family.weight_table(config))
    wrong = sorted(set(specs) ^ set(tensors)) + [
        f"{name} {list(tensors[name].shape)} != {list(spec.shape)}"
        for name, spec in specs.items()
        if name in tensors and tuple(tensors[name].shape) != spec.shape
    ]
    if wrong:
        raise AssertionError(
            f"the {family.name} family's {fmt.name!r} format placed tensors wrongly: {wrong[:5]}"
        )


def _nothing_fits(src: Path, tensors: Tensors, failures) -> str:
    keys = list(tensors)
    text = (
        f"{src}: no registered weight format places these {len(keys)} tensors "
        f"(first keys: {', '.join(keys[:4])})."
    )
    for family, fmt, error in sorted(failures, key=lambda f: len(f[2].unplaced))[:3]:
        text += f"\n  {family.name} / {fmt.name}: {error}"
    return text
