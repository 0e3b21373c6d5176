"""zoo: train, fine-tune and compare standard architectures in PyTorch/Lightning and Keras 3.

``import zoo`` is cheap: the API is loaded on first use (so a family module can import
``zoo.family`` without building the recipe schema first), and torch and TensorFlow are
imported only by the calls that use them.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

_API = {
    "TrainResult": "zoo.api",
    "create_model": "zoo.api",
    "evaluate": "zoo.api",
    "inspect_checkpoint": "zoo.api",
    "list_architectures": "zoo.api",
    "resume": "zoo.api",
    "load_checkpoint": "zoo.api",
    "save_checkpoint": "zoo.api",
    "train": "zoo.api",
    "load": "zoo.loading",
    "predict": "zoo.inference",
    "Prediction": "zoo.predict_outputs",
    "Predicted": "zoo.inference",
    "import_checkpoint": "zoo.interchange.importing",
    "export_checkpoint": "zoo.interchange.exporting",
    "quantize_checkpoint": "zoo.interchange.quantizing",
    "Comparison": "zoo.compare",
    "compare": "zoo.compare",
    "Recipe": "zoo.recipe",
    "RecipeError": "zoo.recipe",
    "load_recipe": "zoo.recipe",
}
__all__ = sorted(_API)


def __getattr__(name: str) -> Any:
    if name not in _API:
        raise AttributeError(f"module 'zoo' has no attribute {name!r}")
    value = getattr(importlib.import_module(_API[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return [*globals(), *__all__]
