"""PEFT's LoRA files (``adapter_model.safetensors`` + ``adapter_config.json``) <-> zoo adapters.

PEFT names an adapter by the transformers module it adapts (``transformer.h.0.attn.c_attn``);
zoo by its point (``h.0.attn.q``). Which module holds which point, and in which rows and
columns, is not written twice here: it is read off the family's own ``hf`` format, by sending
probe tensors through it (each point's rows numbered, then its columns, then its id) and
looking where the numbers land. A transformers module that holds several zoo points (GPT-2's
fused ``c_attn`` holds q, k and v) gets one PEFT adapter of their summed rank: A stacked, B
block-diagonal, its rank and alpha in ``rank_pattern``/``alpha_pattern``; read back, each point
takes the module's A and its own rows of B. Both give the same ``W x + scale B A x`` as zoo's.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from zoo.family import ArchitectureConfig, Family
from zoo.lora.adapter import A, Adapter, AdapterFile, B
from zoo.recipe.lora_targets import Point, points
from zoo.safetensors_io import CheckpointError
from zoo.weights import tensor_specs

WEIGHTS, CONFIG = "adapter_model.safetensors", "adapter_config.json"
PREFIX = "base_model.model."


@dataclass(frozen=True)
class Module:
    """A transformers module's matrix, as zoo points: along its output axis, which point
    (None: no point) and which of that point's rows; along its input axis, which column."""

    name: str
    point_of_row: list[str | None]
    row: np.ndarray
    column: np.ndarray
    conv1d: bool  # stored [in, out] (transformers' Conv1D): PEFT's fan_in_fan_out

    def points(self) -> list[str]:
        return list(dict.fromkeys(p for p in self.point_of_row if p is not None))


def modules(family: Family, config: ArchitectureConfig) -> dict[str, Module]:
    """Every transformers module that holds a zoo point, by module name."""
    fmt = family.format("hf")
    specs = tensor_specs(family.weight_table(config))
    every = points(family, config)
    ids = {p.name: i + 1 for i, p in enumerate(every)}

    def probe(kind: str) -> dict[str, np.ndarray]:
        tensors = {n: np.zeros(s.shape, np.float32) for n, s in specs.items() if s.dtype == "float32"}
        tensors |= {n: np.zeros(s.shape, s.dtype) for n, s in specs.items() if s.dtype != "float32"}
        for p in every:
            start, stop = p.rows or (0, p.out_features)
            block = tensors[p.weight][start:stop]
            if kind == "id":
                block[...] = ids[p.name]
            elif kind == "row":
                block[...] = np.arange(1, stop - start + 1, dtype=np.float32)[:, None]
            else:
                block[...] = np.arange(1, p.in_features + 1, dtype=np.float32)[None, :]
        return fmt.write(config, tensors)[0]

    by_id, rows, columns = probe("id"), probe("row"), probe("column")
    names = {i: name for name, i in ids.items()}
    found = {}
    for key, value in by_id.items():
        value = np.asarray(value)
        if value.ndim != 2 or not key.endswith(".weight") or not value.any():
            continue
        row = np.asarray(rows[key])
        conv1d = bool(value.shape[0] > 1 and np.all(row[0] == row[-1]) and value.shape[1] > 1)
        if conv1d:  # [in, out]: look at it as (out, in)
            value, row, column = value.T, row.T, np.asarray(columns[key]).T
        else:
            column = np.asarray(columns[key])
        first = int(np.flatnonzero(value[:, 0])[0])
        found[key.removesuffix(".weight")] = Module(
            key.removesuffix(".weight"),
            [names.get(int(i)) for i in value[:, 0]],
            row[:, 0].astype(np.int64) - 1,
            column[first].astype(np.int64) - 1,
            conv1d,
        )
    return found


def _scale(alpha: float, rank: int, rslora: bool) -> float:
    return alpha / (rank**0.5 if rslora else rank)


# ---------------------------------------------------------------------------- export


def export(adapter_file: AdapterFile, out: str | Path, base_name: str | None = None) -> Path:
    """Write ``adapter_file`` as PEFT's two files in the folder ``out``."""
    from safetensors.numpy import save_file

    adapter, tensors = adapter_file.adapter, adapter_file.tensors
    if adapter.train_bias != "none":
        raise CheckpointError(
            f"{adapter_file.path}: trains biases (train_bias {adapter.train_bias!r}); PEFT's export takes "
            "adapters only: fold it into its base with zoo merge instead"
        )
    ours = {p.name for p in adapter.points}
    settings = adapter.settings
    rank, alpha, rslora = int(settings["rank"]), float(settings["alpha"]), bool(settings.get("use_rslora"))
    written, targets, rank_pattern, alpha_pattern, conv1d = {}, [], {}, {}, set()
    for name, module in modules(adapter_file.family, adapter_file.config).items():
        held = [p for p in module.points() if p in ours]
        if not held:
            continue
        a_parts, b = [], np.zeros((len(module.point_of_row), 0), np.float32)
        for p in held:
            a_p, b_p = tensors[f"{p}.{A}"], tensors[f"{p}.{B}"]
            a_parts.append(a_p[:, module.column])
            block = np.zeros((len(module.point_of_row), b_p.shape[1]), np.float32)
            mine = np.array([q == p for q in module.point_of_row])
            block[mine] = b_p[module.row[mine]] * adapter.scales[p]
            b = np.concatenate([b, block], axis=1)
        r_m = b.shape[1]
        # B carries each point's scale; the module's own scale is divided back out of it.
        alpha_m = alpha * (r_m / rank if not rslora else (r_m / rank) ** 0.5)
        b /= _scale(alpha_m, r_m, rslora)
        written[f"{PREFIX}{name}.lora_A.weight"] = np.ascontiguousarray(np.concatenate(a_parts), np.float32)
        written[f"{PREFIX}{name}.lora_B.weight"] = np.ascontiguousarray(b, np.float32)
        targets.append(name)
        conv1d.add(module.conv1d)
        if r_m != rank:
            rank_pattern[name], alpha_pattern[name] = r_m, alpha_m
    if len(conv1d) > 1:
        raise CheckpointError(
            "the adapted modules mix Linear and Conv1D layouts; PEFT's fan_in_fan_out is one flag"
        )
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    config = {
        "peft_type": "LORA",
        "task_type": "CAUSAL_LM" if adapter_file.config.active_task == "language_modeling" else None,
        "base_model_name_or_path": base_name,
        "r": rank,
        "lora_alpha": alpha,
        "lora_dropout": adapter.dropout,
        "target_modules": targets,
        "fan_in_fan_out": conv1d == {True},
        "bias": "none",
        "use_rslora": rslora,
        "rank_pattern": rank_pattern,
        "alpha_pattern": alpha_pattern,
        "init_lora_weights": True,
        "inference_mode": True,
    }
    save_file(written, str(out / WEIGHTS), metadata={"format": "pt"})
    (out / CONFIG).write_text(json.dumps(config, indent=2) + "\n")
    return out


# ---------------------------------------------------------------------------- import


def read(
    src: str | Path, family: Family, config: ArchitectureConfig
) -> tuple[Adapter, dict[str, np.ndarray]]:
    """A PEFT LoRA folder as zoo's adapter on ``config``'s model (the base it was made for)."""
    from safetensors.numpy import load_file

    src = Path(src)
    if not (src / WEIGHTS).is_file() or not (src / CONFIG).is_file():
        raise CheckpointError(f"{src}: not a PEFT adapter folder (it needs {WEIGHTS} and {CONFIG})")
    settings = json.loads((src / CONFIG).read_text())
    refused = {k: settings.get(k) for k in ("use_dora",) if settings.get(k)}
    if settings.get("peft_type", "LORA") != "LORA" or refused or settings.get("bias", "none") != "none":
        raise CheckpointError(
            f"{src}: zoo imports plain LoRA adapters without biases (peft_type LORA, bias none, no DoRA)"
        )
    rank, alpha = int(settings["r"]), float(settings["lora_alpha"])
    rslora = bool(settings.get("use_rslora"))
    stored = load_file(str(src / WEIGHTS))
    by_module = modules(family, config)
    every = {p.name: p for p in points(family, config)}
    chosen: list[Point] = []
    ranks, scales, tensors = {}, {}, {}
    for key in stored:
        if not key.endswith(".lora_A.weight"):
            continue
        name = key.removeprefix(PREFIX).removesuffix(".lora_A.weight")
        if name not in by_module:
            raise CheckpointError(f"{src}: {key} adapts {name!r}, which holds no projection of zoo's model")
        module = by_module[name]
        a, b = stored[key], stored[key.replace("lora_A", "lora_B")]
        r_m = int(_pattern(settings.get("rank_pattern"), name, rank))
        alpha_m = float(_pattern(settings.get("alpha_pattern"), name, alpha))
        inverse = np.argsort(module.column)
        for p in module.points():
            mine = np.array([q == p for q in module.point_of_row])
            b_p = np.zeros((every[p].out_features, a.shape[0]), np.float32)
            b_p[module.row[mine]] = b[mine]
            chosen.append(every[p])
            ranks[p], scales[p] = a.shape[0], _scale(alpha_m, r_m, rslora)
            tensors[f"{p}.{A}"] = np.ascontiguousarray(a[:, inverse], np.float32)
            tensors[f"{p}.{B}"] = b_p
    order = list(every)
    chosen.sort(key=lambda p: order.index(p.name))
    adapter = Adapter(
        tuple(chosen),
        ranks,
        scales,
        float(settings.get("lora_dropout") or 0.0),
        "none",
        {"rank": rank, "alpha": alpha, "use_rslora": rslora, "target": [p.name for p in chosen]},
    )
    return adapter, tensors


def _pattern(patterns: dict | None, name: str, default):
    import re

    for key, value in (patterns or {}).items():
        if re.fullmatch(rf"(.*\.)?{key}", name):
            return value
    return default
