"""The two twins of a recipe, built from the same initial weights, and everything both must share.

A comparison only means something if nothing but the framework differs. This module
holds what is shared: the config bound to the data (and a copy with every dropout at 0,
because the frameworks' dropout masks can never match), the precision each framework
runs in, single-threaded kernels (thread count changes float
results), and the initial tensors both twins start from and are reset to between
sections. The torch twin is the reference: it is built with the recipe's seed and the
Keras twin receives its tensors through the family's weight table.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from zoo import registry
from zoo.checkpoint.keras_variables import tensors_to_keras
from zoo.checkpoint.tables import Port, keras_layer
from zoo.checkpoint.tensors import model_tensors
from zoo.data import Dataset, load_dataset
from zoo.family import ArchitectureConfig, Family
from zoo.finetune import merged_tensors
from zoo.initial_weights import seeded_torch_model
from zoo.lora import attach, checked_base, with_trained_biases
from zoo.lora.adapter import TORCH_PREFIX, ports
from zoo.plan import fine_tune_start
from zoo.precision import PRECISIONS
from zoo.recipe import Recipe


@dataclass(frozen=True)
class Setup:
    """A recipe resolved against its data: what both frameworks build and read."""

    recipe: Recipe
    family: Family
    dataset: Dataset
    config: ArchitectureConfig  # bound to the data, exactly as the recipe trains it
    parity_config: ArchitectureConfig  # the same with every dropout field at 0
    zeroed: dict[str, float] = field(default_factory=dict)  # dropout fields that were not 0
    init: Any = None  # init.from's start (zoo.finetune.InitPlan): both twins load its tensors
    adapter: Any = None  # a LoRA adapter file both twins hold on that base (zoo.lora.AdapterFile)

    @property
    def precision(self) -> str:
        return self.recipe.trainer.precision

    @property
    def task(self) -> str:
        return self.dataset.task

    @property
    def input_kind(self) -> str:
        return self.family.input_kind

    @property
    def batch_size(self) -> int:
        return self.recipe.data.batch_size

    @property
    def gradient_checkpointing(self) -> bool:
        return bool(getattr(self.recipe.trainer, "gradient_checkpointing", False))


def prepare(recipe: Recipe, adapter: Any = None) -> Setup:
    """The recipe bound to its data; with ``init.from``, as ``zoo train`` starts from it (the
    checkpoint's config and tokenizer, the tensors the data re-shapes re-initialised). ``adapter``
    (zoo.compare.source.adapter_of) goes on that start in both twins."""
    family = registry.get_family(recipe.model.architecture)
    init = None
    if recipe.init.from_ is not None:
        recipe, dataset, config, init, _ = fine_tune_start(recipe, family)
    else:
        dataset = load_dataset(recipe.data, family.input_kind)
        config = recipe.model.bind(dataset.info)
    parity_config, zeroed = without_dropout(config)
    return Setup(recipe, family, dataset, config, parity_config, zeroed, init, adapter)


def without_dropout(config: ArchitectureConfig) -> tuple[ArchitectureConfig, dict[str, float]]:
    """``config`` with every field whose name contains "dropout" at 0.0, and the old non-zero values."""
    names = [name for name in type(config).model_fields if "dropout" in name]
    zeroed = {name: getattr(config, name) for name in names if getattr(config, name)}
    fields = {**config.model_dump(), **dict.fromkeys(names, 0.0)}
    return type(config).model_validate(fields), zeroed


# ------------------------------------------------------------------------------ threads


@contextlib.contextmanager
def single_threaded() -> Iterator[dict[str, Any]]:
    """One kernel thread in each framework, and TensorFlow on the CPU.

    torch's thread count is restored afterwards. TensorFlow takes thread settings only
    before its runtime starts; when it already ran in this process (an earlier model) its
    setting stays, and the returned dict says so.
    """
    import tensorflow as tf
    import torch

    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    threads: dict[str, Any] = {"torch": 1}
    try:
        tf.config.threading.set_intra_op_parallelism_threads(1)
        tf.config.threading.set_inter_op_parallelism_threads(1)
        threads["tensorflow"] = 1
    except RuntimeError:
        configured = tf.config.threading.get_intra_op_parallelism_threads()
        threads["tensorflow"] = configured or "default (TensorFlow had already started in this process)"
    try:
        with tf.device("/CPU:0"):
            yield threads
    finally:
        torch.set_num_threads(previous)


# ---------------------------------------------------------------------------- precision


def torch_parameter_dtype(precision: str):
    """The dtype Lightning's "true" precisions cast the whole module to (None: float32; the
    mixed ones autocast inside its precision plugin), from the one precision table."""
    import torch

    cast_to = PRECISIONS[precision].cast_to
    return None if cast_to is None else getattr(torch, cast_to)


# -------------------------------------------------------------------------------- twins


@dataclass
class Twins:
    """A torch and a Keras model of one config in one precision holding the same tensors
    (canonical layout). A comparison has two pairs: the recipe's precision, and the
    reference precision its rounding is measured against (``reference_precision``)."""

    setup: Setup
    config: ArchitectureConfig
    precision: str
    torch_model: Any
    keras_model: Any
    table: list[Port]
    initial: dict[str, np.ndarray]
    checkpointing: dict[str, bool] = field(default_factory=dict)

    def reset(self) -> None:
        """Both twins back to the initial tensors (running statistics included)."""
        self.load(self.initial)

    def load(self, tensors: dict[str, np.ndarray]) -> None:
        """Canonical tensors (any float dtype) into both twins, each in its own dtypes."""
        import torch

        state = {name: torch.from_numpy(np.array(value)) for name, value in tensors.items()}
        self.torch_model.load_state_dict(state, strict=True)  # copies into each tensor's own dtype
        tensors_to_keras(self.keras_model, self.table, tensors)

    def torch_state(self) -> dict[str, np.ndarray]:
        """Copies of the torch twin's tensors, floating ones in float64 (exact for every precision)."""
        return dict(self.torch_tensors())

    def torch_tensors(self) -> Iterator[tuple[str, np.ndarray]]:
        """:meth:`torch_state` one tensor at a time, for a caller that needs no float64 copy of
        the whole model (a GPT-2's is 1 GB). Each is a copy: a float64 tensor's
        ``.double().numpy()`` would be a view of it."""
        for name, value in self.torch_model.state_dict().items():
            yield name, np.array(value.detach().cpu().double() if value.is_floating_point() else value.cpu())

    def keras_state(self) -> dict[str, np.ndarray]:
        """The Keras twin's variables in the canonical layout, floating ones in float64.

        Unlike ``zoo.checkpoint.keras_variables.keras_to_tensors`` nothing is rounded to the checkpoint's
        float32, so a float64 run is compared at float64 resolution.
        """
        return dict(self.keras_tensors())

    def keras_tensors(self) -> Iterator[tuple[str, np.ndarray]]:
        """:meth:`keras_state` one port's tensors at a time."""
        for port in self.table:
            layer = keras_layer(self.keras_model, port.layer)
            values = [_float64(keras_layer(layer, name).numpy()) for name in port.variables]
            for spec, array in zip(port.tensors, port.to_torch(*values), strict=True):
                yield spec.name, np.asarray(array)

    @property
    def trainable(self) -> list[str]:
        """Canonical names of the trainable tensors, in table order."""
        return [spec.name for port in self.table for spec in port.tensors if spec.trainable]


def build_twins(
    setup: Setup,
    config: ArchitectureConfig,
    precision: str | None = None,
    initial: dict[str, np.ndarray] | None = None,
) -> Twins:
    """Torch twin from the recipe's seed (or holding ``initial``; or the fine-tune start of
    ``init.from``), its tensors copied into a Keras twin built in ``precision`` (default: the
    recipe's); gradient checkpointing on both where the twins offer it."""
    from zoo.nn.keras.precision import build_keras  # zoo.nn.keras's __init__ imports Keras

    family, held = setup.family, setup.adapter
    precision = precision or setup.precision
    torch_model = seeded_torch_model(family, config, setup.recipe.trainer.seed)
    if initial is None:
        initial = model_tensors(torch_model)  # float32 canonical tensors, before any dtype cast
        if setup.init is not None:  # the checkpoint's, where the data leaves the shapes as they were
            initial = merged_tensors(setup.init, initial)
        if held is not None:  # the base the adapter was trained on, or refused; its trained biases
            start = setup.init.describe() if setup.init else f"the seed-{setup.recipe.trainer.seed} init"
            initial = checked_base(held, initial, f"the base on the comparison's data ({start})")
            initial = with_trained_biases(held, initial)
    lora = held.adapter if held is not None else setup.recipe.init.lora
    if lora is not None:  # adapters on the frozen base: they are the model's trainable tensors
        attach(torch_model, family, config, lora, setup.recipe.trainer.seed, held and held.tensors)
        drawn = {k: v for k, v in model_tensors(torch_model).items() if k.startswith(TORCH_PREFIX)}
        initial = {**drawn, **initial}  # the adapters' init, unless ``initial`` holds them already
    dtype = torch_parameter_dtype(precision)
    if dtype is not None:
        torch_model = torch_model.to(dtype)
    keras_model = build_keras(family, config, precision, initial)
    table = family.weight_table(config)
    if lora is not None:
        adapter = attach(keras_model, family, config, lora, setup.recipe.trainer.seed)
        table = ports(adapter, table, set(adapter.bias_names(family, config)))
    twins = Twins(setup, config, precision, torch_model, keras_model, table, initial)
    twins.reset()  # the torch twin too, where ``initial`` came from elsewhere
    if setup.gradient_checkpointing:
        twins.checkpointing = enable_checkpointing(torch_model, keras_model)
    return twins


def enable_checkpointing(torch_model: Any, keras_model: Any) -> dict[str, bool]:
    """Turn on block-wise recomputation where each twin offers it (``set_grad_checkpointing``,
    or a ``grad_checkpointing`` attribute); say where it did."""
    done = {}
    for name, model in (("torch", torch_model), ("keras", keras_model)):
        if hasattr(model, "set_grad_checkpointing"):
            model.set_grad_checkpointing(True)
        elif hasattr(model, "grad_checkpointing"):
            model.grad_checkpointing = True
        else:
            done[name] = False
            continue
        done[name] = True
    return done


def exact_array(tensor) -> np.ndarray:
    """A numpy copy of a torch tensor in the narrowest dtype that holds its values exactly:
    float32 for float32, bf16 and float16, float64 for float64, integers as they are. A float64
    copy of a float32 model would double what a comparison holds (GPT-2's tensors are 0.5 GB
    in float32)."""
    import torch

    detached = tensor.detach().cpu()
    if detached.is_floating_point() and detached.dtype != torch.float64:
        detached = detached.float()
    return np.array(detached)


def _float64(value: Any) -> np.ndarray:
    array = np.asarray(value)
    return array if array.dtype.kind in "iub" else array.astype(np.float64)
