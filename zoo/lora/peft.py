"""PEFT's LoRA files (``adapter_model.safetensors`` + ``adapter_config.json``) <-> zoo adapters.

PEFT names an adapter by the transformers module it adapts (``transformer.h.0.attn.c_attn``);
zoo by its point (``h.0.attn.q``). Which module holds which point, and in which rows and
columns, is not written twice here: it is read off the family's own ``hf`` format, by sending
probe tensors through it (each point's rows numbered, then its columns, then its id) and
looking where the numbers land. A transformers module that holds several zoo points (GPT-2's
fused ``c_attn`` holds q, k and v) gets one PEFT adapter of their summed rank: A stacked, B
block-diagonal, its rank and alpha in ``rank_pattern``/``alpha_pattern``; read back, each point
takes the module's A and its own rows of B. Both give the same ``W x + scale B A x`` as zoo's.

Besides plain LoRA on projections, what PEFT users save is read and written exactly as PEFT
computes it: LoRA on embeddings (``lora_embedding_A/B``), ``lora_bias`` (B's bias, scaled with
B), and ``modules_to_save`` (whole copies of base modules, which replace the base's). Every
tensor of an adapter file is used, or the import is refused naming it; ``adapter_config.json``
is read by a pydantic model, each problem one line naming the field. What zoo does not compute
(DoRA, other tuners, layer replication...) is refused by name.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, ValidationError, field_validator

from zoo.checkpoint.file import CheckpointError
from zoo.checkpoint.tables import tensor_specs
from zoo.family import ArchitectureConfig, Family
from zoo.lora.adapter import BIAS, A, Adapter, AdapterFile, B, EmbeddingPoint, embedding_points
from zoo.recipe.lora_targets import Point, points

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


def embedding_modules(family: Family, config: ArchitectureConfig) -> dict[str, EmbeddingPoint]:
    """Every transformers embedding module, by module name, with the zoo embedding it holds
    (the same table, unpermuted: found by filling each with its own number)."""
    fmt = family.format("hf")
    specs = tensor_specs(family.weight_table(config))
    tables = embedding_points(family, config)
    tensors = {n: np.zeros(s.shape, s.dtype) for n, s in specs.items()}
    for i, point in enumerate(tables):
        tensors[point.weight] = np.full(tensors[point.weight].shape, i + 1, np.float32)
    found = {}
    for key, value in fmt.write(config, tensors)[0].items():
        value = np.asarray(value)
        if not key.endswith(".weight") or value.ndim != 2 or not value.any():
            continue
        ids = np.unique(value)
        if len(ids) == 1 and 1 <= ids[0] <= len(tables):
            point = tables[int(ids[0]) - 1]
            if value.shape == (point.in_features, point.out_features):
                found[key.removesuffix(".weight")] = point
    return found


def _scale(alpha: float, rank: int, rslora: bool) -> float:
    return alpha / (rank**0.5 if rslora else rank)


# ---------------------------------------------------------------------------- export


def export(
    adapter_file: AdapterFile, out: str | Path, base_name: str | None = None, base: dict | None = None
) -> Path:
    """Write ``adapter_file`` as PEFT's two files in the folder ``out`` (``base``: its base's
    tensors, needed where it saves modules whole: ``zoo.lora.saved_base``)."""
    from safetensors.numpy import save_file

    adapter, tensors = adapter_file.adapter, adapter_file.tensors
    if adapter.train_bias != "none":
        raise CheckpointError(
            f"{adapter_file.path}: trains biases (train_bias {adapter.train_bias!r}); PEFT's export takes "
            "adapters only: fold it into its base with zoo merge instead"
        )
    settings = adapter.settings
    rank, alpha, rslora = int(settings["rank"]), float(settings["alpha"]), bool(settings.get("use_rslora"))
    family, config = adapter_file.family, adapter_file.config
    ours = {p.name for p in adapter.points}
    written, targets, rank_pattern, alpha_pattern, conv1d = {}, [], {}, {}, set()

    def module_scale(r_m: int) -> tuple[float, float]:
        # B carries each point's scale; the module's own scale is divided back out of it.
        alpha_m = alpha * (r_m / rank if not rslora else (r_m / rank) ** 0.5)
        return alpha_m, _scale(alpha_m, r_m, rslora)

    for name, module in modules(family, config).items():
        held = [p for p in module.points() if p in ours]
        if not held:
            continue
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
        alpha_m, scale = module_scale(r_m)
        written[f"{PREFIX}{name}.lora_A.weight"] = np.ascontiguousarray(np.concatenate(a_parts), np.float32)
        written[f"{PREFIX}{name}.lora_B.weight"] = np.ascontiguousarray(b / scale, np.float32)
        if adapter.lora_bias:
            written[f"{PREFIX}{name}.lora_B.bias"] = np.ascontiguousarray(bias / scale, np.float32)
        targets.append(name)
        conv1d.add(module.conv1d)
        if r_m != rank:
            rank_pattern[name], alpha_pattern[name] = r_m, alpha_m
    for name, point in embedding_modules(family, config).items():
        if point.name not in ours:
            continue
        r_m = adapter.ranks[point.name]
        alpha_m, scale = module_scale(r_m)
        b = tensors[f"{point.name}.{B}"] * (adapter.scales[point.name] / scale)
        written[f"{PREFIX}{name}.lora_embedding_A"] = np.ascontiguousarray(
            tensors[f"{point.name}.{A}"], np.float32
        )
        written[f"{PREFIX}{name}.lora_embedding_B"] = np.ascontiguousarray(b, np.float32)
        targets.append(name)
        if r_m != rank:
            rank_pattern[name], alpha_pattern[name] = r_m, alpha_m
    if len(conv1d) > 1:
        raise CheckpointError(
            "the adapted modules mix Linear and Conv1D layouts; PEFT's fan_in_fan_out is one flag"
        )
    saved = _saved_modules(adapter_file, base, set(targets)) if adapter.saved else {}
    written |= {f"{PREFIX}{k}": v for k, v in saved.items()}
    to_save = sorted({k.rsplit(".", 1)[0] for k in saved if ".base_layer." not in k})
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    peft_config = {
        "peft_type": "LORA",
        "task_type": "CAUSAL_LM" if config.active_task == "language_modeling" else None,
        "base_model_name_or_path": base_name,
        "r": rank,
        "lora_alpha": alpha,
        "lora_dropout": adapter.dropout,
        "target_modules": targets,
        "modules_to_save": to_save or None,
        "fan_in_fan_out": conv1d == {True},
        "bias": "none",
        "lora_bias": adapter.lora_bias,
        "use_rslora": rslora,
        "rank_pattern": rank_pattern,
        "alpha_pattern": alpha_pattern,
        "init_lora_weights": True,
        "inference_mode": True,
    }
    save_file(written, str(out / WEIGHTS), metadata={"format": "pt"})
    (out / CONFIG).write_text(json.dumps(peft_config, indent=2) + "\n")
    return out


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


# ---------------------------------------------------------------------- adapter_config.json

# Options of PEFT's LoraConfig that change what a file computes in ways zoo does not: refused by
# name where set (None, False, {} and [] are their "off").
UNSUPPORTED = {
    "use_dora": "DoRA (weight-decomposed LoRA)",
    "use_qalora": "QALoRA",
    "use_bdlora": "block-diagonal LoRA",
    "layer_replication": "layer replication",
    "megatron_config": "Megatron-parallel layers",
    "trainable_token_indices": "trainable tokens",
    "target_parameters": "LoRA on parameters (target_parameters)",
    "alora_invocation_tokens": "activated LoRA (aLoRA)",
    "arrow_config": "Arrow routing",
    "monteclora_config": "MonteCLoRA",
    "velora_config": "VeLoRA",
    "kasa_config": "KaSA",
}
# init_lora_weights that rewrite the base's weights as they make the adapter (the adapter only
# works on that rewritten base, which the file does not hold).
BASE_CHANGING_INITS = ("pissa", "olora", "corda", "loftq", "lora_ga")
Rank = Annotated[StrictInt, Field(gt=0)]
Alpha = Annotated[float, Field(allow_inf_nan=False)]


class PeftSettings(BaseModel):
    """The fields of PEFT's ``adapter_config.json`` zoo reads (others are kept, unread)."""

    model_config = ConfigDict(extra="allow")

    peft_type: str = "LORA"
    r: Rank
    lora_alpha: Alpha
    lora_dropout: float = Field(0.0, ge=0.0, lt=1.0)
    target_modules: list[str] | str | None = None
    modules_to_save: list[str] | None = None
    bias: Literal["none", "all", "lora_only"] = "none"
    use_rslora: StrictBool = False
    lora_bias: StrictBool = False
    fan_in_fan_out: StrictBool = False
    rank_pattern: dict[str, Rank] = Field(default_factory=dict)
    alpha_pattern: dict[str, Alpha] = Field(default_factory=dict)
    init_lora_weights: bool | str = True

    @field_validator("lora_dropout", "rank_pattern", "alpha_pattern", mode="before")
    @classmethod
    def _null_is_default(cls, value, info):
        """Older PEFT versions write null for an unset dropout or pattern."""
        if value is None:
            return 0.0 if info.field_name == "lora_dropout" else {}
        return value


def read_settings(path: Path) -> PeftSettings:
    """``adapter_config.json``, checked: one line naming the first field that is wrong."""
    from zoo.limits import read_json

    fix = "it should be the adapter_config.json PEFT's save_pretrained wrote"
    raw = read_json(path, error=CheckpointError, fix=fix)
    try:
        settings = PeftSettings.model_validate(raw)
    except ValidationError as error:
        raise CheckpointError(f"{path}: {_first_problem(error)}; {fix}") from None
    for name, value in [*settings.rank_pattern.items(), *settings.alpha_pattern.items()]:
        if (
            isinstance(value, bool)
            or not math.isfinite(value)
            or (name in settings.rank_pattern and value < 1)
        ):
            raise CheckpointError(f"{path}: the pattern entry {name!r} is {value!r}; {fix}")
    if settings.peft_type != "LORA":
        raise CheckpointError(f"{path}: is a {settings.peft_type} adapter; zoo imports LoRA (peft_type LORA)")
    if settings.bias != "none":
        raise CheckpointError(
            f"{path}: bias is {settings.bias!r} (PEFT trains the base's biases); zoo imports bias 'none' "
            "(lora_bias, B's own bias, is supported)"
        )
    for name, what in UNSUPPORTED.items():
        if getattr(settings, name, None) not in (None, False, {}, []):
            raise CheckpointError(f"{path}: uses {what} ({name}); zoo imports plain LoRA adapters only")
    init = settings.init_lora_weights
    if isinstance(init, str) and init.lower().startswith(BASE_CHANGING_INITS):
        raise CheckpointError(
            f"{path}: init_lora_weights {init!r} rewrote the base's weights when the adapter was made; "
            "zoo imports adapters of an unchanged base (convert it to plain LoRA with PEFT first)"
        )
    return settings


def _first_problem(error: ValidationError) -> str:
    problem = error.errors()[0]
    field = ".".join(str(part) for part in problem["loc"]) or "the file"
    if problem["type"] == "missing":
        return f"{field} is missing"
    shown = repr(problem.get("input"))
    shown = shown if len(shown) <= 40 else shown[:37] + "..."
    return f"{field} is {shown}: {problem['msg'][:1].lower()}{problem['msg'][1:]}"


def read_weights(path: Path) -> dict[str, np.ndarray]:
    """``adapter_model.safetensors`` as float32 arrays; anything else refused in one line."""
    from safetensors import safe_open

    from zoo.checkpoint.file import read_header, refuse_pickles

    refuse_pickles(path)
    try:
        with safe_open(str(path), framework="pt") as handle:
            read_header(path)  # a name given twice
            tensors = {key: handle.get_tensor(key) for key in handle.keys()}  # noqa: SIM118
    except CheckpointError:
        raise
    except Exception as error:
        problem = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise CheckpointError(
            f"{path}: not a safetensors file ({problem}); PEFT's save_pretrained writes one"
        ) from None
    out = {}
    for key, tensor in tensors.items():
        if not tensor.is_floating_point():
            raise CheckpointError(f"{path}: {key} holds {tensor.dtype} values, not floating point weights")
        out[key] = tensor.float().contiguous().numpy()
    return out


# ---------------------------------------------------------------------------- import

KEY = re.compile(
    r"(?P<module>.+)\.(?P<part>lora_A\.weight|lora_B\.weight|lora_B\.bias|lora_embedding_A|lora_embedding_B)"
)
PARTS = {
    "lora_A.weight": A,
    "lora_B.weight": B,
    "lora_B.bias": BIAS,
    "lora_embedding_A": A,
    "lora_embedding_B": B,
}


@dataclass
class Found:
    """One adapted transformers module's tensors, as the file holds them."""

    name: str
    embedding: bool
    parts: dict[str, np.ndarray]
    keys: dict[str, str]


def read(
    src: str | Path, family: Family, config: ArchitectureConfig, base: dict[str, np.ndarray] | None = None
) -> tuple[Adapter, dict[str, np.ndarray]]:
    """A PEFT LoRA folder as zoo's adapter on ``config``'s model (``base``: its tensors, which the
    saved modules are placed among)."""
    src = Path(src)
    if not (src / WEIGHTS).is_file() or not (src / CONFIG).is_file():
        if (src / CONFIG).is_file() and (src / "adapter_model.bin").is_file():
            raise CheckpointError(
                f"{src}: holds adapter_model.bin, a pickle, which zoo does not unpickle; save the adapter "
                f"with PEFT's save_pretrained(..., safe_serialization=True) for {WEIGHTS}"
            )
        raise CheckpointError(f"{src}: not a PEFT adapter folder (it needs {WEIGHTS} and {CONFIG})")
    settings = read_settings(src / CONFIG)
    weights = src / WEIGHTS
    stored = read_weights(weights)
    linear, embeddings = modules(family, config), embedding_modules(family, config)
    adapted, whole = _sort_keys(weights, stored, settings)
    if not adapted and not whole:
        raise CheckpointError(f"{weights}: holds no LoRA tensors (lora_A/lora_B); nothing to import")
    hf_modules = _hf_modules(family, config)
    _check_targets(src / CONFIG, settings, adapted, hf_modules, linear)
    every = {p.name: p for p in points(family, config)}
    chosen: list[Point] = []
    ranks, scales, tensors = {}, {}, {}
    for found in adapted.values():
        r_m = int(_pattern(settings.rank_pattern, found.name, settings.r))
        alpha_m = float(_pattern(settings.alpha_pattern, found.name, settings.lora_alpha))
        scale = _scale(alpha_m, r_m, settings.use_rslora)
        if found.embedding:
            point = _embedding_point(weights, found, embeddings)
            _check_shapes(weights, found, r_m, point.in_features, point.out_features, settings.lora_bias)
            chosen.append(point)
            ranks[point.name], scales[point.name] = r_m, scale
            tensors[f"{point.name}.{A}"] = np.ascontiguousarray(found.parts[A])
            tensors[f"{point.name}.{B}"] = np.ascontiguousarray(found.parts[B])
            continue
        if found.name not in linear:
            raise CheckpointError(
                f"{weights}: {found.keys[A]} adapts {found.name!r}, which holds no projection of zoo's "
                f"{family.name} model"
                + (
                    " (it is an embedding: PEFT keeps lora_embedding_A/B there)"
                    if found.name in embeddings
                    else ""
                )
            )
        module = linear[found.name]
        _check_shapes(weights, found, r_m, len(module.column), len(module.point_of_row), settings.lora_bias)
        a, b, bias = found.parts[A], found.parts[B], found.parts.get(BIAS)
        inverse = np.argsort(module.column)
        for p in module.points():
            mine = np.array([q == p for q in module.point_of_row])
            b_p = np.zeros((every[p].out_features, r_m), np.float32)
            b_p[module.row[mine]] = b[mine]
            chosen.append(every[p])
            ranks[p], scales[p] = r_m, scale
            tensors[f"{p}.{A}"] = np.ascontiguousarray(a[:, inverse], np.float32)
            tensors[f"{p}.{B}"] = b_p
            if bias is not None:
                bias_p = np.zeros(every[p].out_features, np.float32)
                bias_p[module.row[mine]] = bias[mine]
                tensors[f"{p}.{BIAS}"] = bias_p
    saved = _replacements(weights, family, config, base, whole) if whole else {}
    order = [p.name for p in embedding_points(family, config)] + list(every)
    chosen.sort(key=lambda p: order.index(p.name))
    adapter = Adapter(
        tuple(chosen),
        ranks,
        scales,
        settings.lora_dropout,
        "none",
        {
            "rank": settings.r,
            "alpha": settings.lora_alpha,
            "use_rslora": settings.use_rslora,
            "target": [p.name for p in chosen],
        },
        settings.lora_bias,
        tuple(saved),
    )
    return adapter, tensors | saved


def _sort_keys(
    weights: Path, stored: dict[str, np.ndarray], settings: PeftSettings
) -> tuple[dict[str, Found], dict[str, np.ndarray]]:
    """The file's tensors as LoRA modules (A, B, bias by module) and whole tensors (saved
    modules, an embedding's base copy), by transformers name; any other refused, named."""
    adapted: dict[str, Found] = {}
    whole: dict[str, np.ndarray] = {}
    saved = settings.modules_to_save or []
    for key, value in stored.items():
        if not key.startswith(PREFIX):
            raise CheckpointError(
                f"{weights}: {key} is not a PEFT tensor name (PEFT's are {PREFIX}<module>...); "
                "the file is not what PEFT's save_pretrained writes"
            )
        name = key.removeprefix(PREFIX)
        match = KEY.fullmatch(name)
        if match:
            part, module = match["part"], match["module"]
            if part == "lora_B.bias" and not settings.lora_bias:
                raise CheckpointError(
                    f"{weights}: holds {key}, a LoRA bias, but adapter_config.json has lora_bias false"
                )
            embedding = part.startswith("lora_embedding")
            found = adapted.setdefault(module, Found(module, embedding, {}, {}))
            if found.embedding != embedding:
                raise CheckpointError(
                    f"{weights}: {key} mixes embedding and linear LoRA tensors on {module!r}"
                )
            found.parts[PARTS[part]], found.keys[PARTS[part]] = value, key
        elif re.search(r"(^|\.)lora_", name):
            raise CheckpointError(
                f"{weights}: {key} is a LoRA tensor zoo does not know (it reads lora_A.weight, "
                "lora_B.weight, lora_B.bias, lora_embedding_A and lora_embedding_B)"
            )
        elif ".base_layer." in f".{name}" or any(_names(name.rsplit(".", 1)[0], m) for m in saved):
            whole[name.replace(".base_layer.", ".")] = value
        else:
            raise CheckpointError(
                f"{weights}: {key} is neither a LoRA tensor nor one of a module in modules_to_save "
                f"({', '.join(saved) or 'none'})"
            )
    for found in adapted.values():
        present = next(iter(found.keys.values()))
        for part in (A, B):
            if part not in found.parts:
                tail = f"lora_embedding_{part[-1]}" if found.embedding else f"{part}.weight"
                raise CheckpointError(
                    f"{weights}: holds {present} but not {PREFIX}{found.name}.{tail}; the adapter is "
                    "incomplete"
                )
        if settings.lora_bias and not found.embedding and BIAS not in found.parts:
            raise CheckpointError(
                f"{weights}: lora_bias is true but {found.keys[B].replace('.weight', '.bias')} is missing"
            )
    return adapted, whole


def _names(module: str, target: str) -> bool:
    """PEFT's rule for a listed name: the whole module name, or its ending after a dot."""
    return module == target or module.endswith("." + target)


def _hf_modules(family: Family, config: ArchitectureConfig) -> list[str]:
    """The transformers modules that hold weights, by name (what a target can name)."""
    specs = tensor_specs(family.weight_table(config))
    zeros = {n: np.zeros(s.shape, s.dtype) for n, s in specs.items()}
    return list(dict.fromkeys(k.rsplit(".", 1)[0] for k in family.format("hf").write(config, zeros)[0]))


def _check_targets(path: Path, settings: PeftSettings, adapted: dict, hf_modules: list[str], linear) -> None:
    """Every target names a module of the model, and every adapted module is a target."""
    targets = settings.target_modules
    if targets is None or targets == "all-linear":

        def targeted(name: str) -> bool:
            return targets is None or name in linear

    elif isinstance(targets, str):
        if not any(re.fullmatch(targets, m) for m in hf_modules):
            raise CheckpointError(f"{path}: target_modules {targets!r} matches no module of the model")

        def targeted(name: str) -> bool:
            return re.fullmatch(targets, name) is not None

    else:
        for target in targets:
            if not any(_names(m, target) for m in hf_modules):
                raise CheckpointError(
                    f"{path}: target_modules names {target!r}, which is no module of the model (its "
                    f"modules: {', '.join(dict.fromkeys(m.rsplit('.', 1)[-1] for m in hf_modules))})"
                )

        def targeted(name: str) -> bool:
            return any(_names(name, t) for t in targets)

    for name, found in adapted.items():
        if not targeted(name):
            raise CheckpointError(
                f"{path.with_name(WEIGHTS)}: {found.keys[A]} adapts {name!r}, which target_modules "
                f"{targets!r} of {CONFIG} does not name"
            )


def _embedding_point(weights: Path, found: Found, embeddings: dict[str, EmbeddingPoint]) -> EmbeddingPoint:
    if found.name not in embeddings:
        raise CheckpointError(
            f"{weights}: {found.keys[A]} adapts {found.name!r} as an embedding, but it is no embedding "
            "table of zoo's model"
        )
    return embeddings[found.name]


def _check_shapes(weights: Path, found: Found, rank: int, fan_in: int, fan_out: int, bias: bool) -> None:
    """A (rank x in), B (out x rank), bias (out,): the config's rank, the base's sizes."""
    want = {A: (rank, fan_in), B: (fan_out, rank)} | (
        {BIAS: (fan_out,)} if bias and not found.embedding else {}
    )
    for part, shape in want.items():
        got = tuple(found.parts[part].shape)
        if got != shape:
            because = (
                f"adapter_config.json's rank for it is {rank}"
                if (part == A and got[:1] != shape[:1]) or (part == B and got[1:] != shape[1:])
                else "the base's module has that size"
            )
            raise CheckpointError(
                f"{weights}: {found.keys[part]} is {list(got)}, but {list(shape)} is needed ({because}); "
                "the adapter was made for another model or config"
            )


def _replacements(
    weights: Path, family: Family, config: ArchitectureConfig, base, whole: dict[str, np.ndarray]
) -> dict[str, np.ndarray]:
    """Saved whole modules (transformers names) as the zoo tensors they replace: the base written
    as transformers', those tensors put in, read back; which zoo tensors they reach is found by
    moving them (+1) and looking at what moves."""
    if base is None:
        raise CheckpointError(f"{weights}: saves modules whole; give its base to place them")
    fmt = family.format("hf")
    hf, meta = fmt.write(config, base)
    hf = {k: np.asarray(v) for k, v in hf.items()}
    for name, value in whole.items():
        if name not in hf:
            raise CheckpointError(
                f"{weights}: saves {name}, which zoo's {family.name} model does not hold as such (a head "
                "tied to the token embedding has no matrix of its own); import the adapter without it"
            )
        if value.shape != hf[name].shape:
            raise CheckpointError(
                f"{weights}: saves {name} as {list(value.shape)}, but the base's is {list(hf[name].shape)}"
            )
    placed = fmt.read({**hf, **whole}, meta or {})[1]
    moved = fmt.read({**hf, **{k: v + 1 for k, v in whole.items()}}, meta or {})[1]
    return {
        n: np.ascontiguousarray(placed[n], np.float32)
        for n in placed
        if not np.array_equal(placed[n], moved[n])
    }


def _pattern(patterns: dict, name: str, default):
    """PEFT's ``get_pattern_key``: the first key that is the module name's ending after a dot."""
    for key, value in (patterns or {}).items():
        if re.match(rf"(.*\.)?({key})$", name):
            return value
    return default
