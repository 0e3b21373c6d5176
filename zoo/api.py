"""The Python API: the same verbs as the ``zoo`` command line.

Nothing here imports torch or TensorFlow at module level; each framework is imported
by the call that needs it.
"""

from __future__ import annotations

import importlib
import json
import logging
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from zoo import registry
from zoo.hardware import check_trainer
from zoo.recipe import Recipe, load_recipe, normalize_framework
from zoo.runs import RunDir, check_launch, is_primary_process, record_stop
from zoo.state import latest_state
from zoo.tokenizer import saved_tokenizer

log = logging.getLogger("zoo")
BACKENDS = {"lightning": "zoo.lightning.trainer", "keras": "zoo.keras.trainer"}


def list_architectures() -> list[registry.Entry]:
    return registry.list_architectures()


def create_model(name: str, framework: str = "lightning", seed: int | None = None, **config: Any):
    """A torch ``nn.Module`` or a built ``keras.Model`` of a family or preset.

    With a ``seed``, both frameworks return the very same initial tensors (torch's
    initialisation under that seed, as ``zoo train`` starts from); without one, each
    framework initialises its own way.
    """
    from zoo import initial_weights

    framework = _framework(framework)
    family = registry.get_family(name)
    cfg = registry.resolve_config(name, **config)
    if seed is not None:
        if framework == "keras":
            return initial_weights.seeded_keras_model(family, cfg, seed)
        return initial_weights.seeded_torch_model(family, cfg, seed)
    return family.build_keras(cfg) if framework == "keras" else family.build_torch(cfg)


@dataclass(frozen=True)
class TrainResult:
    run_dir: Path
    checkpoint: Path
    metrics: dict[str, float]
    framework: str
    history: list[dict[str, str]] = field(default_factory=list)


def train(
    recipe: Recipe | str | Path | dict,
    framework: str | None = None,
    overrides: list[str] | tuple = (),
    *,
    resume: tuple[RunDir, Path] | None = None,
) -> TrainResult:
    """Train a recipe in one framework, test it, export the common checkpoint.

    ``resume`` (a run folder and one of its states; see :func:`resume`) continues a run.
    """
    from zoo.checkpoint import save_checkpoint
    from zoo.data import load_dataset
    from zoo.runs import read_metrics

    if not isinstance(recipe, Recipe):
        recipe = load_recipe(recipe, overrides)
    framework = _framework(framework or recipe.trainer.framework)
    if framework != recipe.trainer.framework:  # re-validate: some knobs depend on the framework
        raw = recipe.model_dump(mode="json", by_alias=True, exclude_unset=True)
        recipe = load_recipe({**raw, "trainer": {**raw.get("trainer", {}), "framework": framework}})
    check_trainer(recipe.trainer)  # before a run folder exists: a refused run leaves nothing behind
    check_launch(recipe.trainer)  # a scheduler's RANK/WORLD_SIZE/SLURM_*/TF_CONFIG against the recipe
    family = registry.get_family(recipe.model.architecture)
    init = None
    if recipe.init.from_ is not None:
        from zoo import finetune

        checkpoint, base = finetune.base_config(recipe, family)
        tokenizer = saved_tokenizer(checkpoint)  # the checkpoint's token ids, not the recipe's
        if tokenizer is not None and getattr(recipe.data, "tokenizer", None) not in (None, "char"):
            log.info(f"tokenizing with the tokenizer of {recipe.init.from_}, not data.tokenizer")
        dataset = load_dataset(recipe.data, family.input_kind, tokenizer=tokenizer, extend_vocab=True)
        model_vocab = getattr(checkpoint.config, "vocab_size", None)
        if tokenizer is not None and model_vocab and dataset.info.get("vocab_size", 0) <= model_vocab:
            # The checkpoint's ids, in a table that may be larger than its tokenizer (GPT-2's rows
            # past its tokens, a vocabulary padded to a multiple of 64): the table stays as it is.
            dataset.info["vocab_size"] = model_vocab
        config = base.bind(dataset.info)
        init = finetune.plan(recipe, family, checkpoint, config)
        log.info(init.describe())
    else:
        dataset = load_dataset(recipe.data, family.input_kind)
        config = recipe.model.bind(dataset.info)
    for note in dataset.notes:
        log.warning(note)
    check_context(config, dataset)
    recipe = recipe.model_copy(update={"model": config})
    primary = is_primary_process()
    if resume is not None:
        run = resume[0] if primary else None
        os.environ[RUN_DIR_VARIABLE] = str(resume[0].path)
    else:
        run = _run_dir(recipe, framework) if primary else None
    started = time.perf_counter()
    backend = importlib.import_module(BACKENDS[framework])
    state = resume[1] if resume else None
    try:
        model, metrics = backend.fit(recipe, config, family, dataset, run, init, state)
    except (Exception, KeyboardInterrupt) as error:
        record_stop(run, error)  # says what is kept; a diverged run is marked, never offered a resume
        raise
    if run is None:  # another rank of a data-parallel job: rank 0 writes the files
        shared = Path(os.environ.get(RUN_DIR_VARIABLE, "."))
        return TrainResult(shared, shared / "model.safetensors", metrics, framework)
    checkpoint = save_checkpoint(
        model,
        run.checkpoint,
        recipe=recipe.to_dict(),
        metrics=metrics,
        vocab=dataset.vocab,
        dtype=recipe.export.dtype,
    )
    if dataset.tokenizer is not None:  # the ids mean nothing without it: it travels alongside
        dataset.tokenizer.save(checkpoint.parent)
    run.write_summary({
        "recipe": recipe.name, "framework": framework, "architecture": config.architecture,
        "preset": config.preset, "metrics": metrics,
        "total_seconds": round(time.perf_counter() - started, 3),
        "checkpoint": str(checkpoint),
    })  # fmt: skip
    return TrainResult(run.path, checkpoint, metrics, framework, read_metrics(run.metrics))


RUN_DIR_VARIABLE = "ZOO_RUN_DIR"


def check_context(config, dataset) -> None:
    """Padded text wider than the model's positions would fail at the first batch; say so now."""
    from zoo.data import DataError

    context = config.context_length()
    if context is None or dataset.train.mask is None:
        return
    width = max(split.x.shape[1] for split in (dataset.train, dataset.val, dataset.test) if len(split))
    if width > context:
        raise DataError(
            f"the padded examples are {width} tokens long but model {config.preset or config.architecture!r} "
            f"reads at most {context}; set data.max_length to {context} or less"
        )


def resume(run_dir: str | Path, force: bool = False) -> TrainResult:
    """Continue an interrupted run from its newest saved state, in the framework it used.

    Refused while another process holds the run, when its recipe.yaml was edited since the
    start (unless ``force``), and for a run that diverged (see :func:`zoo.runs.prepare_resume`).
    """
    from zoo.checkpoint import CheckpointError
    from zoo.runs import prepare_resume

    run = RunDir(Path(run_dir))
    if not run.recipe.is_file():
        raise CheckpointError(f"{run_dir}: not a zoo run folder (no recipe.yaml)")
    state = latest_state(run.path)
    if state is None:
        raise CheckpointError(f"{run_dir}: has no saved training state under state/ to resume from")
    recipe = load_recipe(run.recipe)
    prepare_resume(run, state, recipe.to_dict(), force)
    log.info(f"resuming {run.path} from {state.name}")
    return train(recipe, recipe.trainer.framework, resume=(run, state))


def _run_dir(recipe: Recipe, framework: str) -> RunDir:
    """Create the run folder and tell processes launched later (DDP ranks) where it is."""
    name = recipe.export.run_name or RunDir.default_name(recipe.name, framework)
    run = RunDir.create(recipe.export.dir, name)
    run.write_recipe(recipe.to_dict(), recipe.to_yaml())
    os.environ[RUN_DIR_VARIABLE] = str(run.path)
    return run


def save_checkpoint(model, path, **kwargs) -> Path:
    from zoo.checkpoint import save_checkpoint as save

    return save(model, path, **kwargs)


def load_checkpoint(path, framework: str = "lightning", architecture: str | None = None):
    from zoo.checkpoint import load_checkpoint as load

    return load(path, _framework(framework), architecture)


def evaluate(
    checkpoint: str | Path,
    recipe: Recipe | str | Path | dict,
    framework: str = "lightning",
    overrides: list[str] | tuple = (),
) -> dict[str, float]:
    """Metrics of a checkpoint on the test split of a recipe's data, in either framework."""
    from zoo.checkpoint import CheckpointError, read_checkpoint
    from zoo.data import load_dataset

    framework = _framework(framework)
    if not isinstance(recipe, Recipe):
        recipe = load_recipe(recipe, overrides)
    found = read_checkpoint(checkpoint)
    dataset = load_dataset(recipe.data, found.family.input_kind, tokenizer=saved_tokenizer(found))
    task = found.config.active_task
    if task != dataset.task:
        raise CheckpointError(f"{checkpoint}: a {task} model cannot be evaluated on data for {dataset.task}")
    try:
        found.config.bind(dataset.info)
    except ValueError as error:
        raise CheckpointError(f"{checkpoint}: does not fit the recipe's data: {error}") from None
    model = load_checkpoint(checkpoint, framework)
    backend = importlib.import_module(BACKENDS[framework])
    if framework == "keras":
        return backend.evaluate(model, dataset, found.family.input_kind, recipe.data.eval_batch_size)
    return backend.evaluate(model, dataset, recipe.data.eval_batch_size)


def inspect_checkpoint(path) -> dict[str, Any]:
    """Metadata (JSON fields decoded) and the tensor table of a checkpoint."""
    from zoo.checkpoint import read_checkpoint

    checkpoint = read_checkpoint(path)
    metadata: dict[str, Any] = {}
    for key, value in checkpoint.metadata.items():
        try:
            metadata[key] = json.loads(value) if value[:1] in "{[" else value
        except json.JSONDecodeError:
            metadata[key] = value
    tensors = checkpoint.family.weight_table(checkpoint.config)
    table = [(s.name, s.shape, s.dtype) for port in tensors for s in port.tensors]
    return {"metadata": metadata, "tensors": table}


def _framework(name: str) -> str:
    framework = normalize_framework(name)
    if framework not in BACKENDS:
        raise ValueError(f"framework {name!r} is not one of: lightning (alias torch), keras")
    return framework
