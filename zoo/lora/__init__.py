"""LoRA: low-rank adapters trained on a frozen base in either twin, saved alone, PEFT-compatible.

- :mod:`zoo.recipe.lora_targets`: the adaptable projections of a model, from its weight table (pure).
- :mod:`zoo.lora.adapter`: the adapter as numpy (PEFT's init, merge, base digest).
- :mod:`zoo.lora.adapter_file`: its file, written and read back checked.
- :mod:`zoo.lora.torch_lora`, :mod:`zoo.lora.keras_lora`: the adapters in each twin.
- PEFT's ``adapter_model.safetensors`` + ``adapter_config.json``: where its tensors sit
  (:mod:`zoo.lora.peft_layout`), its config (:mod:`zoo.lora.peft_config`), written
  (:mod:`zoo.lora.peft_export`) and read (:mod:`zoo.lora.peft_import`).

This module is what the trainers, ``zoo train`` and ``zoo merge``/``export``/``import`` call.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from zoo import initial_weights, registry
from zoo.backend import framework_name
from zoo.checkpoint.file import CheckpointError
from zoo.checkpoint.metadata import read_checkpoint, write_checkpoint
from zoo.checkpoint.quantized import SCALE
from zoo.checkpoint.tensors import framework_of, load_tensors, model_tensors
from zoo.lora import peft_export, peft_import
from zoo.lora.adapter import Adapter, base_digest, initial_tensors, merged
from zoo.lora.adapter_file import AdapterFile, check_base, is_adapter, read_adapter, write_adapter
from zoo.lora.peft_layout import WEIGHTS

__all__ = [
    "Adapter", "AdapterFile", "attach", "base_digest", "base_of", "base_tensors", "check_base",
    "checked_base", "export_peft", "hold_quantized_base", "import_peft", "initial_tensors", "is_adapter",
    "load_adapter", "merge_adapter", "merged", "read_adapter", "save_adapter", "trained_tensors",
    "with_trained_biases", "write_adapter",
]  # fmt: skip


def attach(model: Any, family, config, lora, seed: int, tensors: dict[str, np.ndarray] | None = None):
    """Freeze ``model`` (either twin, its base already loaded) and attach the adapter ``lora`` (a
    recipe's ``init.lora``, or an :class:`Adapter`) holding ``tensors``, or PEFT's init drawn
    from ``seed``. Returns the adapter."""
    if getattr(model, "zoo_lora", None) is not None:  # adapted already (zoo compare's twins)
        return model.zoo_lora
    adapter = lora if isinstance(lora, Adapter) else Adapter.from_recipe(family, config, lora)
    tensors = initial_tensors(adapter, seed) if tensors is None else tensors
    biases = adapter.bias_names(family, config)
    if framework_of(model) == "keras":
        from zoo.lora import keras_lora

        keras_lora.attach(model, family, adapter, tensors, biases)
    else:
        from zoo.lora import torch_lora

        torch_lora.attach(model, adapter, tensors, biases)
    model.zoo_lora = adapter
    return adapter


def hold_quantized_base(model: Any, init) -> list[str]:
    """QLoRA: the frozen base of an adapted twin held as the integers and scales of the quantized
    checkpoint it started from (``init``, a fine-tuning plan), not as float32 weights. The
    numbers are the same to the bit (zoo.nn.{torch,keras}.quantized); what the run trains
    (the adapters, the biases asked for, saved modules, a head the data re-made) stays float.
    Returns the names held as integers."""
    if init is None or getattr(model, "zoo_lora", None) is None:
        return []
    checkpoint = read_checkpoint(init.source)
    if checkpoint.quantization is None:
        return []
    config = model.zoo_config
    family = registry.get_family(config.architecture)
    kept = {*init.head, *init.reinitialised, *init.adapted, *model.zoo_lora.replaced_names(family, config)}
    stored = checkpoint.stored_integers()
    stored = {name: value for name, value in stored.items() if name.removesuffix(SCALE) not in kept}
    if framework_of(model) == "keras":
        from zoo.nn.keras.quantized import hold_integers

        return hold_integers(model, family.weight_table(config), stored, checkpoint.quantization)
    from zoo.nn.torch.quantized import hold_integers

    return hold_integers(model, stored, checkpoint.quantization)


def trained_tensors(model: Any) -> dict[str, np.ndarray]:
    """The adapter's tensors of a twin :func:`attach` adapted (A, B, trained biases)."""
    adapter, config = model.zoo_lora, model.zoo_config
    family = registry.get_family(config.architecture)
    biases = adapter.bias_names(family, config)
    if framework_of(model) == "keras":
        from zoo.lora import keras_lora

        return keras_lora.adapter_tensors(model, family, adapter, biases)
    from zoo.lora import torch_lora

    return torch_lora.adapter_tensors(model, adapter, biases)


def base_tensors(model: Any) -> dict[str, np.ndarray]:
    """The base's canonical tensors of an adapted twin, as they are now (the trained biases too)."""
    return {k: v for k, v in model_tensors(model).items() if not k.startswith("lora.")}


def save_adapter(model: Any, path: str | Path, base: dict[str, Any], **kwargs) -> Path:
    """Write an adapted twin's adapter alone; ``base`` is ``{"path": ...}`` or ``{"seed": ...}``,
    completed here with the digest of the frozen base tensors."""
    adapter, config = model.zoo_lora, model.zoo_config
    family = registry.get_family(config.architecture)
    trained = set(adapter.replaced_names(family, config))
    frozen = {k: v for k, v in base_tensors(model).items() if k not in trained}
    base = {**base, "sha256": base_digest(frozen)}
    return write_adapter(
        path, family, config, adapter, trained_tensors(model), base, framework=framework_of(model), **kwargs
    )


def base_of(adapter_file: AdapterFile, base: str | Path | None = None) -> tuple[dict[str, np.ndarray], str]:
    """The base tensors an adapter goes on (``base``, or the one its file names), checked against
    its digest; and where they came from."""
    named = adapter_file.base
    if base is None and named.get("path"):
        base = named["path"]
    if base is not None:
        checkpoint = read_checkpoint(base, adapter_file.family.name)
        tensors, where = checkpoint.float32_tensors(), str(base)
    elif "seed" in named:
        tensors, where = (
            initial_weights.initial_tensors(adapter_file.family, adapter_file.config, int(named["seed"])),
            (f"the seed-{named['seed']} init"),
        )
    else:
        raise CheckpointError(f"{adapter_file.path}: names no base; give one (--base)")
    return checked_base(adapter_file, tensors, where), where


def checked_base(adapter_file: AdapterFile, tensors: dict[str, np.ndarray], where: str) -> dict:
    """``tensors``, if they are the base the adapter was trained on (its digest, the biases it
    trains left out); else refused, naming both digests (:func:`check_base`)."""
    trained = set(adapter_file.adapter.replaced_names(adapter_file.family, adapter_file.config))
    check_base(adapter_file, {k: v for k, v in tensors.items() if k not in trained}, where)
    return tensors


def with_trained_biases(adapter_file: AdapterFile, tensors: dict[str, np.ndarray]) -> dict:
    """A base's tensors with the biases the adapter trained (``train_bias``) at their trained
    values and the modules it saved whole (PEFT's ``modules_to_save``) in place of the base's."""
    return {**tensors, **{k: v for k, v in adapter_file.tensors.items() if k in tensors}}


def load_adapter(path: str | Path, framework: str = "lightning", base: str | Path | None = None) -> Any:
    """The twin of ``framework`` holding the adapter's base (checked by digest) and the adapter."""
    adapter_file = read_adapter(path)
    tensors, _ = base_of(adapter_file, base)
    family, config = adapter_file.family, adapter_file.config
    tensors = with_trained_biases(adapter_file, tensors)
    if framework_name(framework) == "keras":
        from zoo.nn.keras.precision import build_keras

        model = build_keras(family, config, "32-true", tensors)
    else:
        model = family.build_torch(config)
        load_tensors(model, tensors)
        model.eval()
    attach(model, family, config, adapter_file.adapter, 0, adapter_file.tensors)
    return model


# ----------------------------------------------------------------- files in and out


def _free(path: Path, overwrite: bool) -> Path:
    if path.exists() and not overwrite:
        raise CheckpointError(f"{path}: already exists; choose another --out or pass --overwrite")
    return path


def merge_adapter(path: str | Path, out: str | Path, base: str | Path | None = None, overwrite=False) -> Path:
    """The adapter folded into its base (``W + scale * B @ A``, its trained biases in place): a
    full zoo checkpoint that needs no adapter. ``out`` is a file, or a folder for model.safetensors."""
    adapter_file = read_adapter(path)
    tensors, where = base_of(adapter_file, base)
    out = Path(out)
    target = _free(out / "model.safetensors" if out.is_dir() or not out.suffix else out, overwrite)
    whole = merged(tensors, adapter_file.adapter, adapter_file.tensors)  # refused before anything is written
    target.parent.mkdir(parents=True, exist_ok=True)
    vocab = json.loads(adapter_file.metadata.get("task_info", "{}")).get("vocab")
    return write_checkpoint(
        target,
        adapter_file.config,
        whole,
        framework=adapter_file.metadata.get("framework", "lightning"),
        recipe=json.loads(adapter_file.metadata.get("recipe", "{}")),
        metrics=json.loads(adapter_file.metadata.get("metrics", "{}")),
        vocab=vocab,
        source={"merged": str(adapter_file.path), "base": where},
    )


def export_peft(path: str | Path, out: str | Path, overwrite: bool = False) -> Path:
    """The adapter as PEFT's ``adapter_model.safetensors`` + ``adapter_config.json`` in ``out``."""
    out = Path(out)
    _free(out / WEIGHTS, overwrite)
    adapter_file = read_adapter(path)
    return peft_export.export(adapter_file, out, adapter_file.base.get("path"), saved_base(adapter_file))


def saved_base(adapter_file: AdapterFile) -> dict[str, np.ndarray] | None:
    """The base an adapter that saves modules whole goes on (PEFT's export writes those
    modules' every tensor, the base's among them); None for one that saves none."""
    return base_of(adapter_file)[0] if adapter_file.adapter.saved else None


def import_peft(src: str | Path, base: str | Path, out: str | Path, overwrite: bool = False) -> Path:
    """A PEFT LoRA folder made for ``base``'s model (a zoo checkpoint, e.g. ``zoo import`` of the
    transformers model) -> a zoo adapter file on that base."""
    out = Path(out)
    target = _free(out / "adapter.safetensors" if out.is_dir() or not out.suffix else out, overwrite)
    checkpoint = read_checkpoint(base)
    base_tensors = checkpoint.float32_tensors()
    adapter, tensors = peft_import.read(src, checkpoint.family, checkpoint.config, base_tensors)
    target.parent.mkdir(parents=True, exist_ok=True)
    replaced = set(adapter.replaced_names(checkpoint.family, checkpoint.config))
    digest = base_digest(base_tensors, exclude=replaced)
    return write_adapter(
        target,
        checkpoint.family,
        checkpoint.config,
        adapter,
        tensors,
        {"path": str(Path(base).resolve()), "sha256": digest},
        framework="imported",
        vocab=json.loads(checkpoint.metadata.get("task_info", "{}")).get("vocab"),
    )
