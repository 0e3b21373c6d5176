"""The recipe: one pydantic schema that says what to train and how, for both frameworks.

- ``schema``: the whole recipe, its export section and the checks across sections (pure: never
  looks at the machine; ``zoo.hardware`` checks that when a run starts);
- the sections it holds: ``data`` (with ``image_data`` and ``stream_data``), ``optimization``
  (optimizer and schedule), ``trainer``, ``fine_tuning`` (``init``) and ``tracking``;
- ``capabilities``: what each precision and strategy means in each framework;
- ``overrides``: ``--set a.b=value``;
- ``errors``: problems rendered one per line, with field paths and allowed keys;
- ``loader``: :func:`load_recipe`, all of the above in order.
"""

from zoo.recipe.capabilities import (
    CAPABILITIES,
    FRAMEWORK_ALIASES,
    FRAMEWORKS,
    KERAS_POLICIES,
    PRECISIONS,
    Capabilities,
    Precision,
    Strategy,
    normalize_framework,
)
from zoo.recipe.data import DigitsData, NpzData, TextClassificationData, TextData
from zoo.recipe.errors import RecipeError, describe
from zoo.recipe.fine_tuning import InitConfig
from zoo.recipe.image_data import Augmentation, ImageFolderData
from zoo.recipe.loader import load_recipe
from zoo.recipe.optimization import SGD, Adam, AdamW, Constant, Cosine, OptimizerConfig, ScheduleConfig, Step
from zoo.recipe.overrides import apply_override
from zoo.recipe.schema import DataConfig, ExportConfig, ModelConfig, Recipe, data_task
from zoo.recipe.stream_data import StreamData
from zoo.recipe.trainer import Framework, TrainerConfig

__all__ = [
    "CAPABILITIES",
    "FRAMEWORKS",
    "FRAMEWORK_ALIASES",
    "KERAS_POLICIES",
    "PRECISIONS",
    "SGD",
    "Adam",
    "AdamW",
    "Augmentation",
    "Capabilities",
    "Constant",
    "Cosine",
    "DataConfig",
    "DigitsData",
    "ExportConfig",
    "Framework",
    "ImageFolderData",
    "InitConfig",
    "ModelConfig",
    "NpzData",
    "OptimizerConfig",
    "Precision",
    "Recipe",
    "RecipeError",
    "ScheduleConfig",
    "Step",
    "Strategy",
    "StreamData",
    "TextClassificationData",
    "TextData",
    "TrainerConfig",
    "apply_override",
    "data_task",
    "describe",
    "load_recipe",
    "normalize_framework",
]
