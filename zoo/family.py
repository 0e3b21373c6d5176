"""What an architecture family is: the contract every folder under ``architectures/`` fills.

A family is plain data plus import paths. The torch and Keras twins are named by
``"module:attribute"`` strings and imported only when a model is built, so listing,
showing and validating never pay for importing a deep-learning framework.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, Self

from pydantic import BaseModel, ConfigDict, Field

from zoo.weights import Port

InputKind = Literal["image", "sequence"]
Task = Literal["classification", "language_modeling"]


class ArchitectureConfig(BaseModel):
    """Base of every family's config: strict, and aware of which fields the data decides.

    ``DATA_FIELDS`` name the fields a dataset can fill in (class count, input size...).
    Their defaults fit the embedded data; a value the user set explicitly is checked
    against the data instead of being overwritten.
    """

    model_config = ConfigDict(extra="forbid", validate_assignment=True)
    DATA_FIELDS: ClassVar[tuple[str, ...]] = ()

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
        return self.model_validate({**self.model_dump(), **updates})

    def sample_shape(self) -> tuple[int, ...]:
        """Shape of one input sample in the canonical (torch) layout."""
        raise NotImplementedError

    @property
    def language_model(self) -> bool:
        """Families that do several tasks have a ``task`` field; the rest classify."""
        return getattr(self, "task", "classification") == "language_modeling"

    def example_input(self, batch: int, seed: int = 0):
        """A random batch in the canonical layout, for tests and benchmarks: token ids for a
        language model, normal floats otherwise."""
        import numpy as np

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
class Preset:
    name: str
    description: str
    fields: Mapping[str, Any]


@dataclass(frozen=True)
class Family:
    """One architecture family, registered under the ``zoo.architectures`` entry point."""

    name: str
    description: str
    config: type[ArchitectureConfig]
    input_kind: InputKind
    tasks: tuple[Task, ...]
    weight_table: Callable[[Any], list[Port]]
    torch_model: str  # "module:callable(config) -> torch.nn.Module"
    keras_model: str  # "module:callable(config) -> keras.Model", built
    presets: tuple[Preset, ...] = field(default_factory=tuple)

    def build_torch(self, config: ArchitectureConfig):
        return _resolve(self.torch_model)(config)

    def build_keras(self, config: ArchitectureConfig):
        return _resolve(self.keras_model)(config)


def _resolve(target: str) -> Callable[..., Any]:
    module, _, attribute = target.partition(":")
    return getattr(importlib.import_module(module), attribute)
