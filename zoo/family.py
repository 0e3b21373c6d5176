"""What an architecture family is: the contract every folder under ``architectures/`` fills.

A family is plain data plus import paths. The torch and Keras twins are named by
``"module:attribute"`` strings and imported only when a model is built, so listing,
showing and validating never pay for importing a deep-learning framework.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, Self, get_args

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from zoo.checkpoint.foreign import ForeignFormat, resolve
from zoo.checkpoint.tables import Port
from zoo.errors import DataError

InputKind = Literal["image", "sequence", "tokens"]
# "features": a backbone without a head; it returns the last hidden state and is not trained alone.
Task = Literal[
    "classification", "language_modeling", "token_classification", "masked_language_modeling", "features"
]
Framework = Literal["lightning", "keras"]
TASKS: tuple[str, ...] = get_args(Task)
FRAMEWORKS: tuple[str, ...] = get_args(Framework)
# The most classes a classifier head takes, in every family: a label id of 10**12 in a data file
# would otherwise build a head of 10**12 outputs (terabytes) before anything could say so.
MAX_CLASSES = 1_000_000


class ArchitectureConfig(BaseModel):
    """Base of every family's config: strict, and aware of which fields the data decides.

    ``DATA_FIELDS`` name the fields a dataset can fill in (class count, input size...).
    Their defaults fit the embedded data; a value the user set explicitly is checked
    against the data instead of being overwritten.
    """

    model_config = ConfigDict(extra="forbid", validate_assignment=True)
    DATA_FIELDS: ClassVar[tuple[str, ...]] = ()
    # The task of a config without a ``task`` field (a single-task family). A family that does
    # several tasks has a ``task`` field instead, whose literal values are the family's tasks.
    TASK: ClassVar[Task] = "classification"

    architecture: str
    preset: str | None = Field(None, description="The named preset these values started from.")

    def bind(self, info: Mapping[str, Any]) -> Self:
        """Return this config with the data-decided fields taken from ``info``."""
        updates = {}
        for key in self.DATA_FIELDS:
            if key not in info:
                continue
            value = info[key]
            if key in self.model_fields_set and getattr(self, key) != value:
                raise ValueError(
                    f"model.{key} is {getattr(self, key)!r} but the data has {value!r}; "
                    f"remove model.{key} from the recipe to take it from the data"
                )
            updates[key] = value
        try:
            return self.model_validate({**self.model_dump(), **updates})
        except ValidationError as error:
            given = ", ".join(f"{k}={v!r}" for k, v in updates.items())
            problems = "; ".join(e["msg"].removeprefix("Value error, ") for e in error.errors())
            raise DataError(
                f"the data ({given}) does not fit model {self.preset or self.architecture!r}: {problems}"
            ) from None

    @property
    def active_task(self) -> Task:
        """The task this config builds: its ``task`` field, or the class's fixed ``TASK``."""
        return self.__dict__.get("task") or self.TASK

    @property
    def language_model(self) -> bool:
        """Whether the config builds a next-token model (its task is language modeling)."""
        return self.active_task == "language_modeling"

    def sample_shape(self) -> tuple[int, ...]:
        """Shape of one example input sample in the canonical (torch) layout, without the batch.

        Every family implements it; :meth:`example_input` (the one example-input builder of
        tests, benchmarks and compare) draws batches of this shape."""
        raise NotImplementedError(f"{type(self).__name__} does not implement sample_shape()")

    def variant(self) -> str:
        """What this config builds, in a word or two, where the family builds more than one kind of
        net under its name (a GRU in the lstm family, a ResNet-style net in the cnn family): the
        VARIANT column of ``zoo list``. Empty where the family's name says it all."""
        return ""

    def context_length(self) -> int | None:
        """The longest sequence the model can read (a position table's rows), or None when
        the length is unbounded (recurrent nets) or meaningless (images)."""
        return None

    def example_input(self, batch: int, seed: int = 0):
        """A random batch in the canonical layout, for tests and benchmarks: token ids for a
        language model, normal floats otherwise."""
        rng = np.random.default_rng(seed)
        shape = (batch, *self.sample_shape())
        if self.language_model:
            return rng.integers(0, self.vocab_size, size=shape, dtype=np.int64)
        return rng.normal(size=shape).astype(np.float32)

    def task_info(self) -> dict[str, Any]:
        """What a user of a checkpoint needs besides the weights (class count, vocabulary)."""
        if self.language_model:
            return {"vocab_size": self.vocab_size}
        return {"num_classes": self.num_classes}


@dataclass(frozen=True)
class InputSpec:
    """What both twins read, in the canonical (torch) layout.

    ``image``: float32 ``(N, C, H, W)``; the Keras twin reads ``(N, H, W, C)``.
    ``sequence``: float32 features ``(N, T, F)`` for classification, int64 token ids
    ``(N, T)`` for language modeling; the same in both twins.
    ``tokens``: int64 token ids ``(N, T)`` for every task, the same in both twins.
    ``padding_mask``: the twins take an optional ``padding_mask`` (N, T) bool argument
    (True marks padding, the opposite of transformers' ``attention_mask``) and ignore padded steps.
    """

    kind: InputKind
    padding_mask: bool = False

    def dtype(self, task: Task) -> str:
        """The input's dtype: token ids for token inputs and language models, floats otherwise."""
        return "int64" if self.kind == "tokens" or task == "language_modeling" else "float32"

    def layout(self, task: Task, framework: Framework = "lightning") -> str:
        """The input's axes in ``framework``: images are channels-first in torch, last in Keras."""
        if self.kind == "tokens":
            return "NT"
        if self.kind == "image":
            return "NCHW" if framework == "lightning" else "NHWC"
        return "NT" if task == "language_modeling" else "NTF"


@dataclass(frozen=True)
class Preset:
    name: str
    description: str
    fields: Mapping[str, Any]


@dataclass(frozen=True)
class Family:
    """One architecture family, registered under the ``zoo.architectures`` entry point.

    Every piece is checked when the registry loads (:func:`zoo.registry.check_family`), so a
    plugin that misses one fails there, by name, not halfway through a training run.
    """

    name: str
    description: str
    config: type[ArchitectureConfig]
    inputs: InputSpec
    tasks: tuple[Task, ...]
    weight_table: Callable[[Any], list[Port]]
    torch_model: str  # "module:callable(config) -> torch.nn.Module"
    keras_model: str  # "module:callable(config) -> keras.Model", built
    grad_checkpointing: tuple[Framework, ...] = ()  # twins whose set_grad_checkpointing recomputes
    presets: tuple[Preset, ...] = field(default_factory=tuple)
    # Foreign weight layouts the family reads (``zoo import``) and writes (``zoo export``).
    formats: tuple[ForeignFormat, ...] = ()
    # "module:callable(tensors, old_config, new_config) -> tensors": carries tensors whose shape
    # follows the data over to new data instead of re-initialising them when fine-tuning (a
    # ViT's position embedding at another image size). It returns only the tensors it carried.
    adapt_tensors: str | None = None
    # Other libraries' names of the family's models (timm's "vit_tiny_patch16_224", transformers'
    # "bert-base-uncased") -> the family or preset of the same shape: ``zoo.load`` takes them.
    aliases: Mapping[str, str] = field(default_factory=dict)
    # The projections LoRA adapts when a recipe's init.lora names none (zoo.recipe.lora_targets' names).
    lora_targets: tuple[str, ...] = ()

    @property
    def input_kind(self) -> InputKind:
        """What the family reads (image, sequence, tokens), which picks the data it trains on."""
        return self.inputs.kind

    def build_torch(self, config: ArchitectureConfig):
        """The torch twin of ``config`` (with gradient checkpointing where the family declares it)."""
        return self._checked(resolve(self.torch_model)(config), "lightning")

    def build_keras(self, config: ArchitectureConfig):
        """The Keras twin of ``config`` (with gradient checkpointing where the family declares it)."""
        return self._checked(resolve(self.keras_model)(config), "keras")

    def supports_grad_checkpointing(self, framework: str) -> bool:
        """Whether ``trainer.grad_checkpointing`` can recompute this family's blocks in ``framework``."""
        return framework in self.grad_checkpointing

    def set_grad_checkpointing(self, model, framework: str, enable: bool) -> None:
        """Turn block-wise recomputation on or off where the family declares it; refuse to
        turn it on where it does not."""
        if self.supports_grad_checkpointing(framework):
            model.set_grad_checkpointing(enable)
        elif enable:
            raise ValueError(
                f"the {self.name!r} family does not support gradient checkpointing on {framework} "
                f"(it declares: {', '.join(self.grad_checkpointing) or 'none'}); "
                "set trainer.gradient_checkpointing=false"
            )

    def adapt(self, tensors, old_config: ArchitectureConfig, new_config: ArchitectureConfig) -> dict:
        """The tensors ``adapt_tensors`` carries over to ``new_config`` (none without the hook)."""
        if self.adapt_tensors is None:
            return {}
        return resolve(self.adapt_tensors)(tensors, old_config, new_config)

    def format(self, name: str) -> ForeignFormat:
        """The family's foreign weight layout called ``name`` (torchvision, timm, hf...), or an error
        listing the ones it has."""
        for candidate in self.formats:
            if candidate.name == name:
                return candidate
        known = ", ".join(f.name for f in self.formats) or "none"
        raise ValueError(f"the {self.name!r} family has no weight format {name!r} (it has: {known})")

    def _checked(self, model, framework: str):
        if self.supports_grad_checkpointing(framework) and not hasattr(model, "set_grad_checkpointing"):
            target = self.torch_model if framework == "lightning" else self.keras_model
            raise TypeError(
                f"the {self.name!r} family declares gradient checkpointing on {framework}, but "
                f"{target} built a {type(model).__name__} without set_grad_checkpointing(enable)"
            )
        return model
