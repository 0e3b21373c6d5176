"""One initialisation for both twins: the torch twin's, drawn from the recipe's seed.

Keras' initialisers differ from torch's in distribution (Glorot kernels and zero biases
against Kaiming-uniform kernels and uniform biases), and no framework's generator can
replay another's draws. Left to themselves, two runs of one recipe would start from
different points, and that alone would make their accuracies differ. So zoo draws the
torch twin's initial tensors once per seed and the Keras twin loads them through the
weight table: two runs of a recipe then differ only by dropout masks and kernel rounding.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from zoo.checkpoint.tensors import model_tensors
from zoo.family import ArchitectureConfig, Family


def seeded_torch_model(family: Family, config: ArchitectureConfig, seed: int) -> Any:
    """The torch twin as ``torch.manual_seed(seed)`` initialises it (Lightning's
    ``seed_everything`` seeds torch's generator the same way)."""
    import torch

    torch.manual_seed(seed)
    return family.build_torch(config)


def initial_tensors(family: Family, config: ArchitectureConfig, seed: int) -> dict[str, np.ndarray]:
    """The canonical tensors a run of ``config`` starts from, in either framework."""
    return model_tensors(seeded_torch_model(family, config, seed))


def seeded_keras_model(family: Family, config: ArchitectureConfig, seed: int) -> Any:
    """The Keras twin holding exactly the tensors :func:`seeded_torch_model` draws."""
    from zoo.nn.keras.precision import build_keras  # zoo.nn.keras's __init__ imports Keras

    return build_keras(family, config, "32-true", initial_tensors(family, config, seed))
