"""A run, planned once: recipe -> data -> resolved model config -> fine-tuning start -> run folder.

Everything a backend needs to train is decided here, before any framework is imported, and
handed over as one frozen :class:`RunPlan`: the dataset is loaded once (a fine-tune tokenizes
with its checkpoint's tokenizer the first time round), the checkpoint a fine-tune starts
from is read once, and every refusal (a machine that cannot run the recipe, data wider than
the model's context, a checkpoint that does not fit) comes before the run folder exists, so
a refused run leaves nothing behind. The last of them is memory (zoo.peak_memory): a run whose
estimated peak is more than the machine has available.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import zoo.data  # load_dataset looked up at each call, where tests count a plan's loads
from zoo import finetune, peak_memory, registry
from zoo.backend import StepPlan, framework_name
from zoo.checkpoint_tokenizer import saved_tokenizer
from zoo.data import DataError
from zoo.hardware import SetupError, check_trainer
from zoo.metrics_file import top_k
from zoo.recipe import Recipe, load_recipe
from zoo.runs import RunDir, check_launch, is_primary_process

if TYPE_CHECKING:
    from zoo.data import Dataset
    from zoo.family import ArchitectureConfig, Family
    from zoo.finetune import InitPlan
    from zoo.preprocessing import Preprocessing

log = logging.getLogger("zoo")
RUN_DIR_VARIABLE = "ZOO_RUN_DIR"  # tells processes launched later (DDP ranks) where the run is


@dataclass(frozen=True)
class RunPlan:
    """What one run trains, on what, from where, and where its files go."""

    recipe: Recipe  # as resolved: its ``model`` is ``config``, as recipe.yaml and the checkpoint record it
    framework: str  # the backend that executes the plan
    family: Family
    config: ArchitectureConfig  # bound to the data (class count, vocabulary, input size)
    dataset: Dataset
    init: InitPlan | None  # the fine-tuning start (init.from); None trains from the seed's init
    run: RunDir | None  # None on the other ranks of a data-parallel job: rank 0 writes the files
    resume: Path | None = None  # a training state of ``run`` to continue from
    preprocessing: Preprocessing | None = None  # what the checkpoint records of the inputs

    @property
    def steps(self) -> StepPlan:
        """What this run's training step is made from (the step kits' input)."""
        return StepPlan(self.recipe, self.family, self.config, self.dataset, self.init)

    @property
    def folder(self) -> Path:
        """The run folder on every rank (the others learn it from the launching process)."""
        return self.run.path if self.run else Path(os.environ.get(RUN_DIR_VARIABLE, "."))


def plan_run(
    recipe: Recipe | str | Path | dict,
    framework: str | None = None,
    overrides: list[str] | tuple = (),
    *,
    resume: tuple[RunDir, Path] | None = None,
) -> RunPlan:
    """Check, load and resolve everything a run of ``recipe`` needs, then create its folder
    (or take over ``resume``'s: a run folder and one of its states)."""
    if not isinstance(recipe, Recipe):
        recipe = load_recipe(recipe, overrides)
    framework = framework_name(framework or recipe.trainer.framework)
    if framework != recipe.trainer.framework:  # re-validate: some knobs depend on the framework
        raw = recipe.model_dump(mode="json", by_alias=True, exclude_unset=True)
        recipe = load_recipe({**raw, "trainer": {**raw.get("trainer", {}), "framework": framework}})
    check_trainer(recipe.trainer)  # before a run folder exists: a refused run leaves nothing behind
    check_launch(recipe.trainer)  # a scheduler's RANK/WORLD_SIZE/SLURM_*/TF_CONFIG against the recipe
    family = registry.get_family(recipe.model.architecture)
    if recipe.init.from_ is not None:
        recipe, dataset, config, init, labels = fine_tune_start(recipe, family)
        log.info(init.describe())
    else:
        (dataset, config, init), labels = _fresh_start(recipe, family), ()
    for note in dataset.notes:
        log.warning(note)
    check_context(config, dataset)
    check_top_k(recipe.trainer.metrics, config)
    recipe = recipe.model_copy(update={"model": config})
    preprocessing = _preprocessing(recipe, family, dataset, config, labels)
    # Last of the refusals: the estimate traces the bound config on the data's own examples.
    peak_memory.check_training(recipe, family, config, dataset, fine_tune=init is not None)
    run, state = _place(recipe, framework, resume)
    return RunPlan(recipe, framework, family, config, dataset, init, run, state, preprocessing)


def _fresh_start(recipe: Recipe, family: Family) -> tuple[Dataset, ArchitectureConfig, None]:
    dataset = zoo.data.load_dataset(recipe.data, family.input_kind)
    return dataset, recipe.model.bind(dataset.info), None


def fine_tune_start(
    recipe: Recipe, family: Family
) -> tuple[Recipe, Dataset, ArchitectureConfig, InitPlan, tuple[str, ...]]:
    """The recipe with the checkpoint's image preprocessing where it leaves it open, the data as
    the checkpoint's model reads it (its tokenizer's ids, not the recipe's), the checkpoint's
    config bound to that data, and the checkpoint's label names where its head carries over as
    it is (``zoo compare`` of a fine-tune starts here too)."""
    from zoo.data.preprocessing import fine_tune_data, of_checkpoint

    checkpoint, base = finetune.base_config(recipe, family)
    recorded = of_checkpoint(checkpoint)
    data = fine_tune_data(recipe.data, recorded, str(recipe.init.from_))
    if data is not recipe.data:
        recipe = recipe.model_copy(update={"data": data})
    tokenizer = saved_tokenizer(checkpoint)
    if tokenizer is not None and getattr(recipe.data, "tokenizer", None) not in (None, "char"):
        log.info(f"tokenizing with the tokenizer of {recipe.init.from_}, not data.tokenizer")
    dataset = zoo.data.load_dataset(recipe.data, family.input_kind, tokenizer=tokenizer, extend_vocab=True)
    model_vocab = getattr(checkpoint.config, "vocab_size", None)
    if tokenizer is not None and model_vocab and dataset.info.get("vocab_size", 0) <= model_vocab:
        # The checkpoint's ids, in a table that may be larger than its tokenizer (rows past its
        # tokens, a vocabulary padded to a multiple of 64): the table stays as it is.
        dataset.info["vocab_size"] = model_vocab
    config = base.bind(dataset.info)
    init = finetune.plan(recipe, family, checkpoint, config)
    head = finetune.head_tensors(family, config)
    kept = recorded is not None and recorded.labels and not head & set(init.reinitialised)
    return recipe, dataset, config, init, (recorded.labels if kept else ())


def _preprocessing(
    recipe: Recipe, family: Family, dataset: Dataset, config: ArchitectureConfig, labels: tuple[str, ...]
) -> Preprocessing | None:
    """What the run's checkpoint records of its inputs: the data's class names, else those of
    the checkpoint it fine-tunes (``labels``, where its head carries over as it is)."""
    from zoo.data.preprocessing import fitting_labels, named_classes, of_recipe_data

    data = recipe.data.model_dump(mode="json")
    names = dataset.classes or named_classes(data) or labels
    return fitting_labels(
        of_recipe_data(data, family.input_kind, labels=names, tokenizer=dataset.tokenizer), config
    )


def check_top_k(metrics: list[str], config: ArchitectureConfig) -> None:
    """A top-k accuracy (trainer.metrics) over more classes than the model has says nothing."""
    classes = getattr(config, "num_classes", None)
    for k in (top_k(name) for name in metrics):
        if k is not None and classes is not None and k > classes:
            raise SetupError(
                f"trainer.metrics asks for top{k}_accuracy but the model has {classes} classes; "
                f"use a k of at most {classes}"
            )


def check_context(config: ArchitectureConfig, dataset: Dataset) -> None:
    """Padded text wider than the model's positions would fail at the first batch; say so now."""
    context = config.context_length()
    if context is None or not dataset.train.has_text_inputs:
        return
    width = max(split.x.shape[1] for split in (dataset.train, dataset.val, dataset.test) if len(split))
    if width > context:
        raise DataError(
            f"the padded examples are {width} tokens long but model {config.preset or config.architecture!r} "
            f"reads at most {context}; set data.max_length to {context} or less"
        )


def _place(
    recipe: Recipe, framework: str, resume: tuple[RunDir, Path] | None
) -> tuple[RunDir | None, Path | None]:
    """The run folder (created here, last, on the primary process only) and the state to resume."""
    primary = is_primary_process()
    if resume is not None:
        os.environ[RUN_DIR_VARIABLE] = str(resume[0].path)
        return (resume[0] if primary else None), resume[1]
    if not primary:
        return None, None
    name = recipe.export.run_name or RunDir.default_name(
        recipe.name, framework, recipe.model.preset or recipe.model.architecture, recipe.init.from_
    )
    run = RunDir.create(recipe.export.dir, name)
    run.write_recipe(recipe.to_dict(), recipe.to_yaml())
    os.environ[RUN_DIR_VARIABLE] = str(run.path)
    return run, None
