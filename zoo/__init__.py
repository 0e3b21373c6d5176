"""zoo: train, fine-tune and compare standard architectures in PyTorch/Lightning and Keras 3.

``import zoo`` is cheap: torch and TensorFlow are imported only by the calls that use them.
"""

from zoo.api import (
    TrainResult,
    create_model,
    inspect_checkpoint,
    list_architectures,
    load_checkpoint,
    save_checkpoint,
    train,
)
from zoo.recipe import Recipe, RecipeError, load_recipe

__version__ = "0.1.0"
__all__ = [
    "Recipe",
    "RecipeError",
    "TrainResult",
    "create_model",
    "inspect_checkpoint",
    "list_architectures",
    "load_checkpoint",
    "load_recipe",
    "save_checkpoint",
    "train",
]
