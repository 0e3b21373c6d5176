"""A zoo LoRA adapter written as PEFT's ``adapter_model.safetensors`` + ``adapter_config.json``.

A transformers module that holds several zoo points (GPT-2's fused ``c_attn`` holds q, k and v)
gets one PEFT adapter of their summed rank: A stacked, B block-diagonal, its rank and alpha in
``rank_pattern``/``alpha_pattern`` (where each point sits: :mod:`zoo.lora.peft_layout`).
Embeddings get ``lora_embedding_A/B``, modules the adapter saves whole PEFT's
``modules_to_save`` copies; ``W x + scale B A x`` is the same as zoo's.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from safetensors.numpy import save_file

from zoo.checkpoint.file import CheckpointError
from zoo.lora.adapter import BIAS, A, B
from zoo.lora.adapter_file import AdapterFile
from zoo.lora.peft_layout import CONFIG, PREFIX, WEIGHTS, Module, embedding_modules, modules, peft_scale


@dataclass
class PeftTensors:
    """What an export writes, gathered module by module: PEFT's tensors, the modules they adapt
    (``target_modules``), those whose rank is not the config's with their rank and alpha, and
    the layouts (Linear or transformers' Conv1D) the adapted modules have."""

    rank: int
    alpha: float
    rslora: bool
    tensors: dict[str, np.ndarray] = field(default_factory=dict)
    targets: list[str] = field(default_factory=list)
    rank_pattern: dict[str, int] = field(default_factory=dict)
    alpha_pattern: dict[str, float] = field(default_factory=dict)
    conv1d: set[bool] = field(default_factory=set)

    def module_scale(self, r_m: int) -> tuple[float, float]:
        """A module of rank ``r_m``'s alpha and PEFT scale: B carries each point's scale; the
        module's own scale is divided back out of it."""
        alpha_m = self.alpha * (r_m / self.rank if not self.rslora else (r_m / self.rank) ** 0.5)
        return alpha_m, peft_scale(alpha_m, r_m, self.rslora)

    def target(self, name: str, r_m: int, alpha_m: float) -> None:
        """``name`` adapted, at rank ``r_m``: a pattern entry where that is not the config's rank."""
        self.targets.append(name)
        if r_m != self.rank:
            self.rank_pattern[name], self.alpha_pattern[name] = r_m, alpha_m


def export(
    adapter_file: AdapterFile, out: str | Path, base_name: str | None = None, base: dict | None = None
) -> Path:
    """Write ``adapter_file`` as PEFT's two files in the folder ``out`` (``base``: its base's
    tensors, needed where it saves modules whole: ``zoo.lora.saved_base``)."""
    adapter = adapter_file.adapter
    if adapter.train_bias != "none":
        raise CheckpointError(
            f"{adapter_file.path}: trains biases (train_bias {adapter.train_bias!r}); PEFT's export takes "
            "adapters only: fold it into its base with zoo merge instead"
        )
    settings = adapter.settings
    gathered = PeftTensors(int(settings["rank"]), float(settings["alpha"]), bool(settings.get("use_rslora")))
    _gather_linear(adapter_file, gathered)
    _gather_embeddings(adapter_file, gathered)
    if len(gathered.conv1d) > 1:
        raise CheckpointError(
            "the adapted modules mix Linear and Conv1D layouts; PEFT's fan_in_fan_out is one flag"
        )
    saved = _saved_modules(adapter_file, base, set(gathered.targets)) if adapter.saved else {}
    written = gathered.tensors | {f"{PREFIX}{k}": v for k, v in saved.items()}
    to_save = sorted({k.rsplit(".", 1)[0] for k in saved if ".base_layer." not in k})
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    peft_config = _peft_config(adapter_file, gathered, base_name, to_save)
    save_file(written, str(out / WEIGHTS), metadata={"format": "pt"})
    (out / CONFIG).write_text(json.dumps(peft_config, indent=2) + "\n")
    return out


def _gather_linear(adapter_file: AdapterFile, gathered: PeftTensors) -> None:
    """One PEFT adapter per transformers module holding points of the adapter."""
    ours = {p.name for p in adapter_file.adapter.points}
    for name, module in modules(adapter_file.family, adapter_file.config).items():
        held = [p for p in module.points() if p in ours]
        if held:
            _gather_module(adapter_file, gathered, name, module, held)


def _gather_module(
    adapter_file: AdapterFile, gathered: PeftTensors, name: str, module: Module, held: list[str]
) -> None:
    """The points ``held`` in ``module`` as its one adapter: A stacked (in the module's column
    order), B block-diagonal on each point's rows with the point's scale carried."""
    adapter, tensors = adapter_file.adapter, adapter_file.tensors
    rows = len(module.point_of_row)
    a_parts, b, bias = [], np.zeros((rows, 0), np.float32), np.zeros(rows, np.float32)
    for p in held:
        a_p, b_p = tensors[f"{p}.{A}"], tensors[f"{p}.{B}"]
        a_parts.append(a_p[:, module.column])
        block = np.zeros((rows, b_p.shape[1]), np.float32)
        mine = np.array([q == p for q in module.point_of_row])
        block[mine] = b_p[module.row[mine]] * adapter.scales[p]
        b = np.concatenate([b, block], axis=1)
        if adapter.lora_bias:
            bias[mine] = tensors[f"{p}.{BIAS}"][module.row[mine]] * adapter.scales[p]
    r_m = b.shape[1]
    alpha_m, scale = gathered.module_scale(r_m)
    written = gathered.tensors
    written[f"{PREFIX}{name}.lora_A.weight"] = np.ascontiguousarray(np.concatenate(a_parts), np.float32)
    written[f"{PREFIX}{name}.lora_B.weight"] = np.ascontiguousarray(b / scale, np.float32)
    if adapter.lora_bias:
        written[f"{PREFIX}{name}.lora_B.bias"] = np.ascontiguousarray(bias / scale, np.float32)
    gathered.target(name, r_m, alpha_m)
    gathered.conv1d.add(module.conv1d)


def _gather_embeddings(adapter_file: AdapterFile, gathered: PeftTensors) -> None:
    """PEFT's ``lora_embedding_A/B`` of every embedding table the adapter adapts."""
    adapter, tensors = adapter_file.adapter, adapter_file.tensors
    ours = {p.name for p in adapter.points}
    for name, point in embedding_modules(adapter_file.family, adapter_file.config).items():
        if point.name not in ours:
            continue
        r_m = adapter.ranks[point.name]
        alpha_m, scale = gathered.module_scale(r_m)
        b = tensors[f"{point.name}.{B}"] * (adapter.scales[point.name] / scale)
        gathered.tensors[f"{PREFIX}{name}.lora_embedding_A"] = np.ascontiguousarray(
            tensors[f"{point.name}.{A}"], np.float32
        )
        gathered.tensors[f"{PREFIX}{name}.lora_embedding_B"] = np.ascontiguousarray(b, np.float32)
        gathered.target(name, r_m, alpha_m)


def _peft_config(
    adapter_file: AdapterFile, gathered: PeftTensors, base_name: str | None, to_save: list[str]
) -> dict:
    """``adapter_config.json`` as PEFT's ``LoraConfig`` saves it, for the gathered adapters."""
    adapter = adapter_file.adapter
    return {
        "peft_type": "LORA",
        "task_type": "CAUSAL_LM" if adapter_file.config.active_task == "language_modeling" else None,
        "base_model_name_or_path": base_name,
        "r": gathered.rank,
        "lora_alpha": gathered.alpha,
        "lora_dropout": adapter.dropout,
        "target_modules": gathered.targets,
        "modules_to_save": to_save or None,
        "fan_in_fan_out": gathered.conv1d == {True},
        "bias": "none",
        "lora_bias": adapter.lora_bias,
        "use_rslora": gathered.rslora,
        "rank_pattern": gathered.rank_pattern,
        "alpha_pattern": gathered.alpha_pattern,
        "init_lora_weights": True,
        "inference_mode": True,
    }


def _saved_modules(adapter_file: AdapterFile, base: dict | None, adapted: set[str]) -> dict[str, np.ndarray]:
    """The transformers tensors of every module the adapter saves whole (by transformers name;
    a module LoRA also adapts as ``<module>.base_layer.<tensor>``, as PEFT saves an embedding)."""
    if base is None:
        raise ValueError("an adapter that saves modules whole is exported with its base's tensors (base=)")
    family, config, adapter = adapter_file.family, adapter_file.config, adapter_file.adapter
    fmt = family.format("hf")
    replaced = {**base, **{n: adapter_file.tensors[n] for n in adapter.saved}}
    written = {k: np.asarray(v) for k, v in fmt.write(config, replaced)[0].items()}
    moved = fmt.write(config, {**replaced, **{n: adapter_file.tensors[n] + 1 for n in adapter.saved}})[0]
    touched = {k.rsplit(".", 1)[0] for k in written if not np.array_equal(written[k], np.asarray(moved[k]))}
    out = {}
    for key, value in written.items():
        module, tensor = key.rsplit(".", 1)
        if module in touched:
            out[f"{module}.base_layer.{tensor}" if module in adapted else key] = np.ascontiguousarray(
                value, np.float32
            )
    return out
