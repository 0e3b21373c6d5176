"""The Python API: the same verbs as the ``zoo`` command line.

Nothing here imports torch or TensorFlow, nor calls into either: a run is planned once
(zoo.plan) and executed by the backend of its framework (zoo.backend), which imports its
framework when it is used.
"""

from __future__ import annotations

import contextlib
import logging
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

import zoo.checkpoint.metadata  # read_checkpoint looked up at each call, where tests count the reads
from zoo import peak_memory, registry
from zoo.backend import backend_for, framework_name
from zoo.backend import load_checkpoint as load_twin
from zoo.backend import save_checkpoint as save_twin
from zoo.checkpoint.file import CheckpointError, NonFiniteTensors, read_header
from zoo.checkpoint.metadata import METADATA_ORDER
from zoo.checkpoint.quantized import SCALE
from zoo.checkpoint.state import latest_state
from zoo.checkpoint_tokenizer import saved_tokenizer
from zoo.data import load_dataset
from zoo.early_stopping import OUTCOME, monitor_mode
from zoo.interchange.inputs import adapter_of, is_adapter_file
from zoo.limits import parse_json
from zoo.loading import checkpoint_file, describe_directory, merged, warn_random_weights
from zoo.lora import read_adapter
from zoo.metrics_file import read_metrics
from zoo.plan import RunPlan, plan_run
from zoo.recipe import Recipe, load_recipe
from zoo.recipe.capabilities import PRECISIONS
from zoo.runs import RunDir, prepare_resume, read_run, record_stop, signals
from zoo.runs.export import best_of, write_model
from zoo.runs.growth import loss_explosion

log = logging.getLogger("zoo")


def list_architectures() -> list[registry.Entry]:
    """Every family and preset installed (shipped and plugins), as ``zoo list`` shows them."""
    return registry.list_architectures()


def create_model(name: str, framework: str = "lightning", seed: int | None = None, **config: Any):
    """A torch ``nn.Module`` or a built ``keras.Model`` of a family or preset.

    With a ``seed``, both frameworks return the very same initial tensors (torch's
    initialisation under that seed, as ``zoo train`` starts from); without one, each
    framework initialises its own way, and a :class:`zoo.loading.RandomWeightsWarning` says in
    one line that the weights are random and nothing was downloaded (``create_model("gpt2")``
    reads as pretrained GPT-2 to a transformers user).
    """
    backend = backend_for(framework)
    model = backend.build(registry.get_family(name), registry.resolve_config(name, **config), seed)
    if seed is None:
        warn_random_weights(f"zoo.create_model({name!r})", name)
    return model


@dataclass(frozen=True)
class TrainResult:
    """What a run left: its folder, its checkpoint, the test metrics (with ``train_seconds``), the
    framework it trained in and its ``metrics.csv`` rows (one per epoch)."""

    run_dir: Path
    checkpoint: Path
    metrics: dict[str, float]
    framework: str
    history: list[dict[str, str]] = field(default_factory=list)
    # resume of a run that had already finished: nothing trained, nothing in its folder touched
    already_finished: bool = False


def train(
    recipe: Recipe | str | Path | dict,
    framework: str | None = None,
    overrides: list[str] | tuple = (),
    *,
    resume: tuple[RunDir, Path] | None = None,
) -> TrainResult:
    """Train a recipe in one framework, test it, export the common checkpoint.

    ``resume`` (a run folder and one of its states; see :func:`resume`) continues a run. A
    SIGTERM meanwhile stops it where it can stop cleanly, saved (zoo.runs.signals).
    """
    with signals.stop_on_sigterm():
        return execute(plan_run(recipe, framework, overrides, resume=resume))


def execute(plan: RunPlan) -> TrainResult:
    """Have the plan's backend train it, then export what the run made: the checkpoint (with
    the tokenizer its ids need beside it) and the run's summary. A run that stops on the way is
    recorded (zoo.runs.record_stop)."""
    started = time.perf_counter()
    try:
        return _train_and_export(plan, started)
    except (Exception, KeyboardInterrupt) as error:
        record_stop(plan.run, error)  # says what is kept; a diverged run is never offered a resume
        raise


def _train_and_export(plan: RunPlan, started: float) -> TrainResult:
    model, metrics = backend_for(plan.framework).fit(plan)
    run, recipe, config = plan.run, plan.recipe, plan.config
    if run is None:  # another rank of a data-parallel job: rank 0 writes the files
        return TrainResult(plan.folder, plan.folder / "model.safetensors", metrics, plan.framework)
    early = {k: metrics.pop(k) for k in OUTCOME if k in metrics}
    checkpoint = write_model(plan, model, metrics)
    if plan.dataset.tokenizer is not None:  # the ids mean nothing without it: it travels alongside
        plan.dataset.tokenizer.save(checkpoint.parent)
    history = read_metrics(run.metrics)
    exploded = loss_explosion(metrics.get("train_loss_first_batch"), history)
    if exploded:
        log.warning(f"warning: {exploded['message']}")
    run.write_summary({
        "recipe": recipe.name, "framework": plan.framework, "architecture": config.architecture,
        "preset": config.preset, "metrics": metrics,
        "total_seconds": round(time.perf_counter() - started, 3),
        "checkpoint": str(checkpoint), **({"loss_exploded": exploded} if exploded else {}),
        **early_stopping_summary(recipe, checkpoint, early),
    })  # fmt: skip
    return TrainResult(run.path, checkpoint, metrics, plan.framework, history)


def early_stopping_summary(recipe: Recipe, checkpoint: Path, early: dict[str, float]) -> dict[str, Any]:
    """summary.json's ``early_stopping``: the monitored metric, the best epoch (its value, its
    checkpoint) and the last one's, and the epoch the run stopped early at (None: it ran its length)."""
    config = recipe.trainer.early_stopping
    if config is None or "last_epoch" not in early:
        return {}
    best = best_of(checkpoint)
    stopped, found = early.get("stopped_epoch"), "best_epoch" in early
    return {"early_stopping": {
        "monitor": config.monitor, "mode": monitor_mode(config.monitor, config.mode),
        "stopped_epoch": int(stopped) if stopped is not None else None,
        "best": {"epoch": int(early["best_epoch"]) if found else None, "value": early.get("best_value"),
                 "checkpoint": str(best) if found else None},
        "last": {"epoch": int(early["last_epoch"]), "value": early["last_value"],
                 "checkpoint": str(checkpoint)},
    }}  # fmt: skip


def resume(run_dir: str | Path, force: bool = False) -> TrainResult:
    """Continue an interrupted run from its newest saved state, in the framework it used.

    Refused while another process holds the run, when its recipe.yaml was edited since the
    start (unless ``force``), and for a run that diverged (see :func:`zoo.runs.prepare_resume`).
    A run that finished is said to have finished and returned as it is, ``already_finished``:
    no file of its folder is written (its lock included), unless its recipe.yaml was edited
    since (a higher ``trainer.max_epochs``), which ``force`` continues.
    """
    run = RunDir(Path(run_dir))
    if not run.recipe.is_file():
        raise CheckpointError(f"{run_dir}: not a zoo run folder (no recipe.yaml)")
    recipe = load_recipe(run.recipe)
    finished = _finished(run, recipe)
    if finished is not None:
        return finished
    state = latest_state(run.path)
    if state is None:
        raise CheckpointError(f"{run_dir}: has no saved training state under state/ to resume from")
    prepare_resume(run, state, recipe.to_dict(), force)
    log.info(f"resuming {run.path} from {state.name}")
    return train(recipe, recipe.trainer.framework, resume=(run, state))


def _finished(run: RunDir, recipe: Recipe) -> TrainResult | None:
    """The result of a run that already finished with the recipe it has now, read from its
    folder (zoo.runs.read_run: a summary with metrics, its checkpoint, no process holding it);
    None for a run there is something to resume in."""
    info = read_run(run.path)
    if info.status != "finished" or run.recipe_changes(recipe.to_dict()):
        return None
    summary = run.read_summary()
    checkpoint = info.checkpoint or run.checkpoint  # a LoRA run's is its adapter.safetensors
    start = (
        f"zoo merge {checkpoint} --out MERGED, then zoo finetune RECIPE --from MERGED"
        if info.adapter
        else f"zoo finetune RECIPE --from {checkpoint}"
    )
    log.info(
        f"{run.path} finished already ({info.epochs} epochs): nothing to resume, nothing changed. To "
        f"train it longer, raise trainer.max_epochs (or max_steps) in {run.recipe} and run zoo resume "
        f"--force; to train on from its weights, {start}"
    )
    history = read_metrics(run.metrics) if run.metrics.is_file() else []
    framework = summary.get("framework") or recipe.trainer.framework
    metrics = summary["metrics"]
    return TrainResult(run.path, checkpoint, metrics, framework, history, already_finished=True)


def save_checkpoint(model, path, **kwargs) -> Path:
    """Write a twin (a torch module or a Keras model zoo built) as the common checkpoint, which
    either framework loads; ``kwargs`` as :func:`zoo.backend.save_checkpoint` (metrics, recipe)."""
    return save_twin(model, path, **kwargs)


def load_checkpoint(path, framework: str = "lightning", architecture: str | None = None):
    """The twin of ``framework`` holding a checkpoint file's weights (``architecture``, a family
    or preset name, is what the file must hold). A folder is refused, saying what it holds and
    what to call instead: :func:`zoo.load` takes run folders and foreign folders."""
    if Path(path).is_dir():
        raise CheckpointError(f"{path}: a folder, not a checkpoint file: {describe_directory(Path(path))}")

    if is_adapter_file(Path(path)):  # a LoRA adapter: the model is its base with it merged in
        path = merged(Path(path))
    return load_twin(path, framework_name(framework), architecture)


def evaluate(
    checkpoint: str | Path,
    recipe: Recipe | str | Path | dict | None = None,
    framework: str = "lightning",
    overrides: list[str] | tuple = (),
) -> dict[str, float]:
    """Metrics of a checkpoint on the test split of a recipe's data, in either framework, on
    the recipe's accelerator and in its precision. Without ``recipe``, the checkpoint's own:
    its run folder's recipe.yaml, else the recipe recorded in the checkpoint."""
    framework = framework_name(framework)
    # a LoRA adapter merged onto its base too
    found = zoo.checkpoint.metadata.read_checkpoint(checkpoint_file(checkpoint))
    if recipe is None:
        recipe = recorded_recipe(Path(checkpoint), found)
    if not isinstance(recipe, Recipe):
        recipe = load_recipe(recipe, overrides)
    dataset = load_dataset(recipe.data, found.family.input_kind, tokenizer=saved_tokenizer(found))
    task = found.config.active_task
    if task != dataset.task:
        raise CheckpointError(f"{checkpoint}: a {task} model cannot be evaluated on data for {dataset.task}")
    try:
        found.config.bind(dataset.info)
    except ValueError as error:
        raise CheckpointError(f"{checkpoint}: does not fit the recipe's data: {error}") from None
    peak_memory.check_evaluation(
        found.family, found.config, dataset.test.x, recipe.data.eval_batch_size, framework
    )  # before the twin is built and the weights read
    backend = backend_for(framework)
    model = backend.load(found)  # the file read and checked above, not a second time
    metrics = backend.evaluate(model, dataset, recipe.trainer, recipe.data.eval_batch_size)
    refuse_nonfinite_metrics(found, metrics, dataset.test, recipe.trainer.precision)
    return metrics


def recorded_recipe(given: Path, found) -> Path | dict[str, Any]:
    """The recipe a checkpoint was trained with: the recipe.yaml of the run folder ``given`` is (or
    holds the .safetensors file ``given``), else the one its metadata records."""
    folder = given if given.is_dir() else given.parent if given.suffix == ".safetensors" else None
    if folder is not None and (folder / "recipe.yaml").is_file():
        log.info(f"evaluating on the recipe {folder / 'recipe.yaml'}")
        return folder / "recipe.yaml"
    recorded = found.json("recipe", {})
    if isinstance(recorded, dict) and recorded:
        log.info(f"evaluating on the recipe recorded in {found.path}")
        return recorded
    raise CheckpointError(
        f"{given}: records no recipe (an imported or hand-saved checkpoint) and has no run folder's "
        "recipe.yaml; give --recipe RECIPE, whose data's test split it is evaluated on"
    )


class NonFiniteMetrics(NonFiniteTensors):
    """Finite weights whose test loss or metric is not a number: their outputs overflow (or the
    data is not finite). A failed evaluation (exit 1), not a result to report."""


def refuse_nonfinite_metrics(found, metrics: dict[str, float], test, precision: str) -> None:
    """Raise :class:`NonFiniteMetrics` where a metric is NaN or infinite, saying what overflowed:
    the test inputs, where they are not finite themselves, else the model's outputs in the
    precision it ran in, with the weights that are largest (each one finite)."""
    bad = [
        f"{name.replace('_', ' ', 1)} is {value}"
        for name, value in metrics.items()
        if not math.isfinite(value)
    ]
    if not bad:
        return
    x = test.x if isinstance(test.x, np.ndarray) else np.zeros(0)
    if np.issubdtype(x.dtype, np.floating) and not np.isfinite(x).all():
        cause = f"the test inputs hold NaN or infinite values ({int((~np.isfinite(x)).sum())} of {x.size})"
    else:
        peaks = sorted(
            (
                (float(np.max(np.abs(v))), k)
                for k, v in found.tensors().items()
                if np.issubdtype(v.dtype, np.floating) and v.size
            ),
            reverse=True,
        )[:3]
        cause = (
            f"the model's outputs overflow {PRECISIONS[precision].products} although every weight is finite "
            f"(the largest: {', '.join(f'{k} {peak:.3g}' for peak, k in peaks)})"
        )
    raise NonFiniteMetrics(
        f"{found.path}: the {'; the '.join(bad)}: {cause}. These metrics mean nothing: evaluate a "
        "checkpoint from before the weights grew so large, or train again with a lower optimizer.lr"
    )


def inspect_checkpoint(path) -> dict[str, Any]:
    """Metadata (JSON fields decoded) and the tensor table of a checkpoint. The metadata comes in
    the order it is written (keys zoo does not write after, alphabetically), the same every time."""
    path = adapter_of(Path(path))  # a LoRA run folder: its adapter
    if is_adapter_file(path):  # the adapter's own metadata and tensors (A, B, trained biases)
        adapter = read_adapter(path)
        raw, tensors = adapter.metadata, adapter.tensors
        table = [(name, tuple(value.shape), str(value.dtype)) for name, value in sorted(tensors.items())]
    else:
        if Path(path).is_dir():
            path = checkpoint_file(path)  # a run folder's checkpoint, a foreign folder imported
        checkpoint = zoo.checkpoint.metadata.read_checkpoint(path)
        raw = checkpoint.metadata
        ports = checkpoint.family.weight_table(checkpoint.config)
        table = [(s.name, s.shape, s.dtype) for port in ports for s in port.tensors]
        if checkpoint.quantization is not None:  # a weight stored as integers shows its scheme
            stored = read_header(checkpoint.path)
            scheme = checkpoint.quantization.scheme
            table = [(n, shape, scheme if n + SCALE in stored else d) for n, shape, d in table]
    rank = {key: i for i, key in enumerate(METADATA_ORDER)}
    metadata: dict[str, Any] = {}
    for key in sorted(raw, key=lambda k: (rank.get(k, len(rank)), k)):
        value = raw[key]
        metadata[key] = value  # text, unless it is JSON zoo reads
        if value[:1] in "{[":
            with contextlib.suppress(ValueError):
                metadata[key] = parse_json(value, key, error=ValueError, expect=None)
    return {"metadata": metadata, "tensors": table}
