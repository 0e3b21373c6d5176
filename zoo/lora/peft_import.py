"""A PEFT LoRA folder (``adapter_model.safetensors`` + ``adapter_config.json``) read as a zoo
adapter on a model.

A transformers module's adapter is split into the zoo points it holds (where each sits:
:mod:`zoo.lora.peft_layout`): each point takes the module's A and its own rows of B, so both give
the same ``W x + scale B A x``. LoRA on embeddings (``lora_embedding_A/B``), ``lora_bias`` (B's
bias, scaled with B) and ``modules_to_save`` (whole copies of base modules, which replace the
base's) are read exactly as PEFT computes them. Every tensor of an adapter file is used, or the
import is refused naming it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from safetensors import safe_open

from zoo.checkpoint.file import CheckpointError, read_header, refuse_pickles
from zoo.checkpoint.tables import tensor_specs
from zoo.family import ArchitectureConfig, Family
from zoo.lora.adapter import BIAS, A, Adapter, B, EmbeddingPoint, embedding_points
from zoo.lora.peft_config import PeftSettings, read_settings
from zoo.lora.peft_layout import CONFIG, PREFIX, WEIGHTS, Module, embedding_modules, modules, peft_scale
from zoo.recipe.lora_targets import Point, points


def read_weights(path: Path) -> dict[str, np.ndarray]:
    """``adapter_model.safetensors`` as float32 arrays; anything else refused in one line."""
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


@dataclass
class Placed:
    """The zoo points an import adapts, in the order found, each one's rank and scale, and the
    adapter's tensors by zoo name."""

    points: list[Point] = field(default_factory=list)
    ranks: dict[str, int] = field(default_factory=dict)
    scales: dict[str, float] = field(default_factory=dict)
    tensors: dict[str, np.ndarray] = field(default_factory=dict)

    def add(self, point: Point, rank: int, scale: float, tensors: dict[str, np.ndarray]) -> None:
        self.points.append(point)
        self.ranks[point.name], self.scales[point.name] = rank, scale
        self.tensors |= tensors


def read(
    src: str | Path, family: Family, config: ArchitectureConfig, base: dict[str, np.ndarray] | None = None
) -> tuple[Adapter, dict[str, np.ndarray]]:
    """A PEFT LoRA folder as zoo's adapter on ``config``'s model (``base``: its tensors, which the
    saved modules are placed among)."""
    src = Path(src)
    _check_folder(src)
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
    placed = Placed()
    for found in adapted.values():
        r_m = int(_pattern(settings.rank_pattern, found.name, settings.r))
        alpha_m = float(_pattern(settings.alpha_pattern, found.name, settings.lora_alpha))
        scale = peft_scale(alpha_m, r_m, settings.use_rslora)
        if found.embedding:
            point = _embedding_point(weights, found, embeddings)
            _check_shapes(weights, found, r_m, point.in_features, point.out_features, settings.lora_bias)
            embedded = {f"{point.name}.{A}": found.parts[A], f"{point.name}.{B}": found.parts[B]}
            placed.add(point, r_m, scale, {k: np.ascontiguousarray(v) for k, v in embedded.items()})
            continue
        module = _linear_module(weights, found, family, linear, embeddings)
        _check_shapes(weights, found, r_m, len(module.column), len(module.point_of_row), settings.lora_bias)
        for p, tensors in _split_module(found, module, every, r_m).items():
            placed.add(every[p], r_m, scale, tensors)
    saved = _replacements(weights, family, config, base, whole) if whole else {}
    return _imported_adapter(family, config, settings, placed, saved), placed.tensors | saved


def _check_folder(src: Path) -> None:
    """A folder with PEFT's two files (its pickled ``adapter_model.bin`` refused, by name)."""
    if not (src / WEIGHTS).is_file() or not (src / CONFIG).is_file():
        if (src / CONFIG).is_file() and (src / "adapter_model.bin").is_file():
            raise CheckpointError(
                f"{src}: holds adapter_model.bin, a pickle, which zoo does not unpickle; save the adapter "
                f"with PEFT's save_pretrained(..., safe_serialization=True) for {WEIGHTS}"
            )
        raise CheckpointError(f"{src}: not a PEFT adapter folder (it needs {WEIGHTS} and {CONFIG})")


def _linear_module(
    weights: Path, found: Found, family: Family, linear: dict[str, Module], embeddings: dict
) -> Module:
    """The transformers module a linear adapter adapts, which must hold zoo projections."""
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
    return linear[found.name]


def _split_module(
    found: Found, module: Module, every: dict[str, Point], r_m: int
) -> dict[str, dict[str, np.ndarray]]:
    """A module's adapter as each zoo point it holds: the module's A (in zoo's column order) and
    the point's own rows of B (and of B's bias), by point name."""
    a, b, bias = found.parts[A], found.parts[B], found.parts.get(BIAS)
    inverse = np.argsort(module.column)
    out = {}
    for p in module.points():
        mine = np.array([q == p for q in module.point_of_row])
        b_p = np.zeros((every[p].out_features, r_m), np.float32)
        b_p[module.row[mine]] = b[mine]
        tensors = {f"{p}.{A}": np.ascontiguousarray(a[:, inverse], np.float32), f"{p}.{B}": b_p}
        if bias is not None:
            bias_p = np.zeros(every[p].out_features, np.float32)
            bias_p[module.row[mine]] = bias[mine]
            tensors[f"{p}.{BIAS}"] = bias_p
        out[p] = tensors
    return out


def _imported_adapter(
    family: Family, config: ArchitectureConfig, settings: PeftSettings, placed: Placed, saved: dict
) -> Adapter:
    """The :class:`Adapter` of the placed points, in zoo's point order (embeddings first)."""
    order = [p.name for p in embedding_points(family, config)] + [p.name for p in points(family, config)]
    chosen = sorted(placed.points, key=lambda p: order.index(p.name))
    return Adapter(
        tuple(chosen),
        placed.ranks,
        placed.scales,
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
