"""The recipe's schema: what to train and how, for both frameworks. Pure: validating a
recipe reads the recipe (and checks that the files it names exist), never the machine.

Sections: ``model`` (a family config, chosen by ``architecture``, which may also name a
preset), ``data``, ``optimizer``, ``schedule``, ``trainer``, ``init``, ``export``, ``tracking``;
each has its module in this package (``export`` and the model union are here), and this one
checks what spans sections.
Unknown keys are errors everywhere, and a combination that cannot work is refused with
the field, the value and what would, so a recipe never asks for something that is
silently ignored. What needs the machine (a GPU for float16) is checked when a run
starts, by ``zoo.hardware``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any, Literal, Union

import yaml
from pydantic import AfterValidator, BeforeValidator, Field, PositiveInt, model_validator

from zoo import registry
from zoo.family import Family
from zoo.metrics_file import BITS_PER_TOKEN, TASK_METRICS, extra_metric_problem
from zoo.recipe.data import (
    DataBase,
    DigitsData,
    NpzData,
    Section,
    TextClassificationData,
    TextData,
    default_tag,
)
from zoo.recipe.fine_tuning import InitConfig
from zoo.recipe.image_data import ImageFolderData
from zoo.recipe.lora_targets import select
from zoo.recipe.optimization import Adam, Constant, OptimizerConfig, ScheduleConfig
from zoo.recipe.stream_data import StreamData
from zoo.recipe.tracking import TrackingConfig
from zoo.recipe.trainer import TrainerConfig

# The longest file or folder name (bytes) the file system takes; 255 on every common one.
NAME_MAX = 255


def run_name_problem(name: str) -> str | None:
    """Why ``name`` cannot name a run folder inside ``export.dir``, or None. ``zoo validate`` and
    ``zoo train`` both ask (``export.run_name`` below, and zoo.runs.RunDir.create)."""
    problem = text_problem(name)
    if problem:
        return f"export.run_name {problem}"
    if not name or name in (".", "..") or any(c in name for c in "/\\\0"):
        return (
            f"export.run_name {name!r} is not a folder name; give a plain name without '/' or '..' "
            "(run folders are created inside export.dir)"
        )
    if len(os.fsencode(name)) > NAME_MAX - len("-999"):
        return (
            f"export.run_name is {len(os.fsencode(name))} bytes long; a folder name holds at most "
            f"{NAME_MAX} bytes on this system (with room for a '-2' suffix): give a shorter name"
        )
    return None


def text_problem(text: str) -> str | None:
    """Why ``text`` cannot be written as UTF-8 (a file name, JSON, a TensorBoard tag): a lone
    surrogate, which a YAML escape such as ``"\\udce9"`` makes and every writer refuses
    later with a traceback; or None."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as error:
        bad = text[error.start]
        return (
            f"{text!r} is not Unicode text: character {error.start + 1} ({bad!r}) is a lone surrogate "
            '(a YAML escape such as "\\udce9" makes one); write the characters themselves'
        )
    return None


RECIPE_NAME_MAX = NAME_MAX - 128  # bytes; the rest of a run folder's name: model, source, framework, time


def _recipe_name(name: str) -> str:
    """A recipe's name starts the name of its runs' folders
    (``<name>-<model>-<framework>-<time>``, zoo.runs.RunDir.default_name): refused here, naming
    ``name``, where the folder it makes would be refused at ``zoo train`` for a field the user
    never wrote (``export.run_name``), or end in a traceback."""
    problem = text_problem(name)
    if problem:
        raise ValueError(problem)
    if not name or name in (".", "..") or any(c in name for c in "/\\\0"):
        raise ValueError(
            f"{name!r} names the run folders (<name>-<model>-<framework>-<time>) and is not a plain "
            "name; give one without '/', '\\' or '..' (run folders are created inside export.dir)"
        )
    size = len(name.encode())
    if size > RECIPE_NAME_MAX:
        raise ValueError(
            f"is {size} bytes long; it starts the run folders' names (<name>-<model>-<framework>-<time>), "
            f"and a folder name holds {NAME_MAX} bytes: give at most {RECIPE_NAME_MAX}"
        )
    return name


def _folder_name(name: str | None) -> str | None:
    """A run folder's name is one plain path component, as zoo train will create it."""
    problem = None if name is None else run_name_problem(name)
    if problem:
        raise ValueError(problem)
    return name


class ExportConfig(Section):
    dir: Path = Field(Path("checkpoints"), description="Run folders are created under this folder.")
    run_name: Annotated[str | None, AfterValidator(_folder_name)] = Field(
        None,
        description="Name of the run folder; default "
        "'<recipe name>[-<model>][-from-<checkpoint>]-<framework>-<time>'.",
    )
    state_every_n_steps: PositiveInt | None = Field(
        None,
        description="Also save the training state every N optimizer steps (always at epoch ends).",
    )
    keep_states: PositiveInt = Field(2, description="How many of the newest training states to keep.")
    dtype: Literal["float32", "bfloat16", "float16"] = Field(
        "float32", description="Floating dtype of the exported checkpoint's tensors."
    )


# ---------------------------------------------------------------------------- recipe


def _expand_architecture(value: Any) -> Any:
    """Let ``model.architecture`` name a preset: its fields go under the recipe's own."""
    if not isinstance(value, dict):
        return value
    name = value.get("architecture")
    if name is None:
        raise ValueError(f"model.architecture is required; one of: {', '.join(registry.names())}")
    if not isinstance(name, str):
        return value
    try:
        fields = {k: v for k, v in value.items() if k != "architecture"}
        return registry.expand(name, fields)
    except registry.UnknownArchitectureError as error:
        raise ValueError(str(error)) from None


def _model_union():
    configs = tuple(f.config for f in registry.families().values())
    union = configs[0] if len(configs) == 1 else Union[configs]  # noqa: UP007
    return Annotated[union, Field(discriminator="architecture"), BeforeValidator(_expand_architecture)]


ModelConfig = _model_union()
# The data section: one of the sources, chosen by ``name`` (digits where it is left out).
DataConfig = Annotated[
    Union[DigitsData, NpzData, TextData, TextClassificationData, ImageFolderData, StreamData],  # noqa: UP007
    Field(discriminator="name"),
    default_tag("digits"),
]


# How families name the rows of their position table (the longest sequence they read).
POSITION_FIELDS = ("max_len", "n_positions", "max_position_embeddings")


class Recipe(Section):
    """A whole training run: model, data, optimizer, schedule, trainer, fine-tuning start, export
    and tracking, validated in full before anything is built (``zoo.load_recipe`` reads one)."""

    name: Annotated[str, AfterValidator(_recipe_name)] = Field(
        "run", description="Name of the recipe; names the run folders."
    )
    description: str = ""
    model: ModelConfig  # type: ignore[valid-type]
    data: DataConfig = Field(default_factory=DigitsData)
    optimizer: OptimizerConfig = Field(default_factory=Adam)
    schedule: ScheduleConfig = Field(default_factory=Constant)
    trainer: TrainerConfig = Field(default_factory=TrainerConfig)
    init: InitConfig = Field(default_factory=InitConfig)
    export: ExportConfig = Field(default_factory=ExportConfig)
    tracking: TrackingConfig = Field(default_factory=TrackingConfig)

    @model_validator(mode="before")
    @classmethod
    def _task_from_data(cls, raw: Any) -> Any:
        """Families that do several tasks learn theirs from the data, so validate shows it."""
        if not isinstance(raw, dict) or not isinstance(raw.get("model"), dict):
            return raw
        data = raw.get("data") or {}
        task = "classification"
        if isinstance(data, dict) and data.get("name") in ("text", "stream"):
            task = data.get("task", "language_modeling")
        try:
            family = registry.get_family(raw["model"].get("architecture", ""))
        except (registry.UnknownArchitectureError, TypeError):
            return raw
        if "task" in family.config.model_fields and "task" not in raw["model"]:
            raw = {**raw, "model": {**raw["model"], "task": task}}
        return raw

    @model_validator(mode="after")
    def _batches_split_evenly(self):
        world = self.trainer.world_size
        if world > 1 and self.data.batch_size % world:
            raise ValueError(
                f"data.batch_size {self.data.batch_size} does not split over {world} devices "
                f"(trainer.devices x trainer.num_nodes); use a multiple of {world}"
            )
        return self

    @model_validator(mode="after")
    def _task_fits(self):
        family = registry.get_family(self.model.architecture)
        task = data_task(self.data)
        if task not in family.tasks:
            raise ValueError(
                f"model.architecture {family.name!r} does ({', '.join(family.tasks)}), "
                f"but data {self.data.name!r} is for {task}"
            )
        return self

    @model_validator(mode="after")
    def _metrics_offered(self):
        """trainer.metrics names metrics of this run's task, each once."""
        task, asked = data_task(self.data), self.trainer.metrics
        for name in asked:
            problem = extra_metric_problem(name, task)
            if problem:
                raise ValueError(f"trainer.metrics: {problem}")
        if len(set(asked)) < len(asked):
            raise ValueError(f"trainer.metrics names a metric twice ({', '.join(asked)}); name each once")
        return self

    @model_validator(mode="after")
    def _monitor_computed(self):
        """trainer.early_stopping monitors a metric this run computes, on data it has."""
        early = self.trainer.early_stopping
        if early is None:
            return self
        names = monitorable(data_task(self.data), self.trainer.metrics)
        if early.monitor not in names:
            raise ValueError(
                f"trainer.early_stopping.monitor {early.monitor!r} is not a metric of a "
                f"{data_task(self.data)} run; use one of {', '.join(names)}"
            )
        if (
            early.monitor.startswith("val_")
            and getattr(self.data, "val_fraction", None) == 0
            and (self.data.name != "npz")
        ):
            raise ValueError(
                f"trainer.early_stopping.monitor is {early.monitor!r} but data.val_fraction is 0 (no "
                "validation data); set data.val_fraction above 0 or monitor a train_ metric"
            )
        return self

    @model_validator(mode="after")
    def _lora_targets(self):
        """Every ``init.lora.target`` must name a projection of this model (zoo.recipe.lora_targets)."""
        if self.init.lora is not None:
            family = registry.get_family(self.model.architecture)
            select(family, self.model, self.init.lora.target)
        return self

    @model_validator(mode="after")
    def _inputs_fit(self):
        """Labelled text arrives as token ids: a classifier over images or feature vectors (the
        transformer family's linear input) would validate, then fail at its first batch."""
        family = registry.get_family(self.model.architecture)
        if self.data.name != "text_classification" or classifies_token_ids(family):
            return self
        reads = "images" if family.input_kind == "image" else "feature sequences (N, T, F)"
        works = [name for name, f in registry.families().items() if classifies_token_ids(f)]
        raise ValueError(
            f"model.architecture {self.model.preset or family.name!r} classifies {reads}, but data.name "
            f"'text_classification' gives token ids (data.tokenizer {self.data.tokenizer!r}); use a family "
            f"whose classifier reads token ids: {', '.join(works) or 'none is installed'} (or its presets)"
        )

    @model_validator(mode="after")
    def _windows_fit_positions(self):
        """A text window longer than the model's position table fails only at the first
        batch; the recipe alone says so (sequence files are checked when their data binds)."""
        context = self.model.context_length()
        window = getattr(self.data, "seq_len", None)
        if context is not None and window is not None and window > context:
            named = [n for n in POSITION_FIELDS if getattr(self.model, n, None) == context]
            field = f"model.{named[0]}" if named else "model.max_len"
            raise ValueError(
                f"{field} {context} is shorter than data.seq_len {window} (the characters each "
                f"training window feeds the model); raise {field} to at least {window} or lower "
                f"data.seq_len to {context}"
            )
        return self

    def to_dict(self) -> dict[str, Any]:
        """The recipe as plain JSON values, under the names a YAML file uses, its relative file
        paths made absolute (:func:`anchored_paths`): what a run folder and a checkpoint keep
        names the same files from any directory."""
        return anchored_paths(self.model_dump(mode="json", by_alias=True))

    def to_yaml(self) -> str:
        """The recipe as YAML that loads back to the same recipe (what a run folder keeps)."""
        return yaml.safe_dump(self.to_dict(), sort_keys=False)


# The recipe fields that name files or folders (zoo reads them relative to the current directory).
PATH_FIELDS = (
    ("data", "path"), ("data", "root"), ("data", "validation"), ("data", "test"), ("data", "tokenizer"),
    ("init", "from"),
)  # fmt: skip
TOKENIZER_NAMES = ("char", "bpe")  # data.tokenizer values that are not paths


def anchored_paths(raw: dict[str, Any], cwd: str | Path | None = None) -> dict[str, Any]:
    """``raw`` (a recipe as plain values) with each relative path of :data:`PATH_FIELDS` made
    absolute against ``cwd`` (default: the current directory, which zoo reads them from). A run
    keeps its recipe so: ``zoo resume`` and the ``zoo evaluate`` that ``zoo runs`` prints work
    from any directory, where ``data.root: my-images`` would name another folder or none.
    ``os.path.abspath`` keeps the user's links and glob patterns as they are."""
    base = os.fspath(cwd) if cwd is not None else os.getcwd()
    for section, key in PATH_FIELDS:
        values = raw.get(section)
        value = values.get(key) if isinstance(values, dict) else None
        if value is None or (key == "tokenizer" and value in TOKENIZER_NAMES):
            continue
        if isinstance(value, list):
            values[key] = [_absolute(v, base) for v in value]
        elif isinstance(value, str):
            values[key] = _absolute(value, base)
    return raw


def _absolute(path: Any, base: str) -> Any:
    return os.path.abspath(os.path.join(base, path)) if isinstance(path, str) and path else path


def classifies_token_ids(family: Family) -> bool:
    """Whether the family's classifier reads token ids: a family of token inputs (bert), or one
    whose config embeds ids when the data gives them (an ``inputs`` data field: rnn, lstm)."""
    return "classification" in family.tasks and (
        family.input_kind == "tokens" or "inputs" in family.config.DATA_FIELDS
    )


def monitorable(task: str, extra: list[str] = ()) -> list[str]:
    """The epoch metrics ``trainer.early_stopping`` may monitor in a ``task`` run (a language
    model's bits are per character or per token, as its tokenizer decides: both are named;
    ``extra``: trainer.metrics)."""
    bits = (BITS_PER_TOKEN,) if task == "language_modeling" else ()
    metrics = ("loss", *TASK_METRICS[task], *bits, *extra)
    return [f"{split}_{m}" for split in ("val", "train") for m in metrics]


def data_task(data: DataBase) -> str:
    return getattr(data, "task", "language_modeling") if data.name in ("text", "stream") else "classification"
