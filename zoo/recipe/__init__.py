"""The recipe: one pydantic schema that says what to train and how, for both frameworks.

- ``schema``: the sections, their bounds and the checks across fields (pure: never looks
  at the machine; ``zoo.hardware`` checks that when a run starts);
- ``data`` and ``optimization``: the data, optimizer and schedule sections it holds;
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
from zoo.recipe.errors import RecipeError, describe
from zoo.recipe.loader import load_recipe
from zoo.recipe.overrides import apply_override
from zoo.recipe.schema import (
    SGD,
    Adam,
    AdamW,
    Augmentation,
    Constant,
    Cosine,
    DataConfig,
    DigitsData,
    ExportConfig,
    Framework,
    ImageFolderData,
    InitConfig,
    ModelConfig,
    NpzData,
    OptimizerConfig,
    Recipe,
    ScheduleConfig,
    Step,
    StreamData,
    TextClassificationData,
    TextData,
    TrainerConfig,
    data_task,
)

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
