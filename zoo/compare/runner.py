"""``zoo.compare``: put a recipe's two twins side by side and write the report.

Order: resolve the recipe against its data, build the parity twins (dropout 0) from one
set of initial tensors, draw the training batches from both trainers' pipelines, run the
sections (weights, forward, gradients, training: each twin in its real trainer), time
both frameworks on the recipe's real config, then write report.json/md/png and return
the terminal table. Everything runs on the CPU with one kernel thread per framework.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from zoo import peak_memory
from zoo.compare import parity, trajectory

# The stages run_sections calls through their modules, read when called: a test's stand-in runs.
from zoo.compare import speed as speed_section
from zoo.compare import steps as step_kit
from zoo.compare import twins as twin_pairs
from zoo.compare.report import terminal_table, write_reports
from zoo.compare.results import PASS, SectionResult
from zoo.compare.resync import Checker, free_memory
from zoo.compare.source import adapter_of, checkpoint_recipe, data_section, is_checkpoint
from zoo.compare.steps import torch_loader
from zoo.compare.tolerances import reference_precision, tolerances_for
from zoo.compare.twins import prepare, single_threaded
from zoo.data import steps_per_epoch
from zoo.hardware import SetupError
from zoo.model_memory import tensor_bytes
from zoo.progress import bar
from zoo.recipe import Recipe, load_recipe
from zoo.recipe.capabilities import cpu_problems
from zoo.runs import RunDir
from zoo.schedule import lr_table, run_length

DEFAULT_SPEED_STEPS = 50


@dataclass
class Comparison:
    """What ``zoo.compare`` returns: the verdicts, the whole report, and where it was written."""

    recipe: str
    sections: dict[str, SectionResult]
    report: dict[str, Any]
    text: str
    out: Path | None
    files: dict[str, Path] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        """Whether every section agreed within its tolerance (``zoo compare`` exits 1 otherwise)."""
        return all(section.passed for section in self.sections.values())

    @property
    def verdicts(self) -> dict[str, str]:
        """Each section's one-word verdict, by section name."""
        return {name: section.verdict for name, section in self.sections.items()}

    def __str__(self) -> str:
        return self.text


def compare(
    recipe: Recipe | str | Path | dict | None = None,
    steps: int = 100,
    out: str | Path | None = None,
    overrides: list[str] | tuple[str, ...] = (),
    *,
    speed_steps: int = DEFAULT_SPEED_STEPS,
    write: bool = True,
    checkpoint: str | Path | None = None,
    data: str | Path | None = None,
    forward_only: bool = False,
) -> Comparison:
    """Compare the recipe's PyTorch and Keras twins from the same initial weights.

    ``steps`` optimizer steps are compared on the recipe's seeded batch order;
    ``speed_steps`` training steps per framework are timed (0 skips the speed section).
    The report goes to ``out`` (default: ``compare-<recipe>-<time>`` under the recipe's
    ``export.dir``); ``write=False`` writes nothing and only returns the result.

    ``checkpoint`` (or a checkpoint file or run folder given as ``recipe``) compares a user's
    trained or imported model: both twins load its tensors, on ``recipe`` and ``data`` when
    given, else on the recipe its run folder or metadata holds (:mod:`zoo.compare.source`); a
    LoRA adapter's twins load its base and the adapter, and only the adapter trains.
    A recipe's ``init.from`` is honoured the same way. ``forward_only`` checks the weights,
    the forward pass and the gradients, and neither trains nor times. The peak memory is
    estimated first: a comparison the machine cannot hold is refused before anything is built.
    """
    if steps < 1:
        raise ValueError(f"steps must be at least 1, got {steps}")
    adapter = adapter_of(recipe if checkpoint is None else checkpoint)
    recipe = resolve(recipe, overrides, checkpoint, data)
    refuse_cpu_problems(recipe)
    started = time.perf_counter()
    setup = prepare(recipe, adapter)
    if forward_only:
        speed_steps = 0
    check_memory(setup, training=not forward_only, steps=1 if forward_only else steps)
    tolerances = tolerances_for(setup.precision)
    ran = run_sections(setup, tolerances, steps=0 if forward_only else steps, speed_steps=speed_steps)
    report = build_report(setup, 0 if forward_only else steps, ran.threads, ran.checkpointing, tolerances,
                          ran.sections, ran.speed)  # fmt: skip
    report["seconds"] = round(time.perf_counter() - started, 2)
    path = None
    files: dict[str, Path] = {}
    if write:
        path = Path(out) if out is not None else default_out(recipe)
        files = write_reports(report, path)
    return Comparison(recipe.name, ran.sections, report, terminal_table(report, path), path, files)


def refuse_cpu_problems(recipe: Recipe) -> None:
    """A precision compare cannot run on the CPU, refused in zoo's words."""
    problems = cpu_problems(recipe.trainer.precision, "auto", "zoo compare runs both twins on the CPU")
    if problems:  # float16: no fast CPU kernels, and Lightning would silently run bf16
        raise SetupError("; ".join(problems))


@dataclass(frozen=True)
class Sections:
    """What the sections found, and what the report says about how they ran."""

    sections: dict[str, SectionResult]
    checkpointing: dict[str, bool]  # per framework: whether gradient checkpointing was enabled
    speed: dict[str, Any] | None
    threads: dict[str, Any]  # the kernel threads each framework ran with


def run_sections(setup, tolerances, *, steps: int, speed_steps: int) -> Sections:
    """The parity sections on the twins (weights, forward and gradients; training for ``steps``
    steps unless 0, a forward-only check), then the speed section on a pair of its own, one
    kernel thread per framework, behind a progress bar of the stages."""
    recipe = setup.recipe
    batches_per_epoch = steps_per_epoch(len(setup.dataset.train), setup.batch_size)
    epochs, total = run_length(recipe.trainer, batches_per_epoch)  # the run's own schedule
    table = lr_table(recipe.schedule, recipe.optimizer.lr, batches_per_epoch, epochs, total)
    stages = ["building the twins", "weights", "forward and gradients"]
    stages += [f"training, {steps} steps"] if steps else []
    stages += ["speed"] if speed_steps > 0 else []
    with single_threaded() as threads, bar(len(stages), "zoo compare", unit="stage") as shown:

        def stage(name: str) -> None:
            shown.n = stages.index(name)
            shown.set_postfix_str(name)  # refreshes the bar

        stage(stages[0])
        twins = twin_pairs.build_twins(setup, setup.parity_config)
        above = reference_precision(setup.precision)
        reference = (
            twin_pairs.build_twins(setup, setup.parity_config, above, twins.initial) if above else None
        )
        checker = Checker(twins, reference, table, tolerances)
        stage("weights")
        sections = {"weights": parity.check_weights(twins, tolerances)}
        batches = step_kit.training_batches(setup, steps or 1)
        stage("forward and gradients")
        sections["forward"], sections["gradients"], _ = parity.forward_and_gradients(checker, batches[0])
        if steps:
            stage(f"training, {steps} steps")
            sections["training"] = trajectory.check_training(twins, checker, batches, table, tolerances)
        explain_forward(sections)
        checkpointing = twins.checkpointing
        del twins, reference, checker  # the speed section builds its own pair: not beside these two
        speed = None
        if speed_steps > 0:
            free_memory()  # the pairs' Trainers and traced steps hold them in reference cycles
            stage("speed")
            speed = speed_section.measure_speed(setup, table, speed_section.Timing.for_steps(speed_steps))
    return Sections(sections, checkpointing, speed, threads)


def resolve(
    recipe: Recipe | str | Path | dict | None,
    overrides: list[str] | tuple[str, ...],
    checkpoint: str | Path | None,
    data: str | Path | None,
) -> Recipe:
    """The recipe to compare: a checkpoint's (:mod:`zoo.compare.source`), or ``recipe`` itself
    with ``data`` and ``overrides``. A fine-tune setting compare cannot honour (it trains every
    tensor at the recipe's rate) is refused here, before any work."""
    if checkpoint is None and isinstance(recipe, str | Path) and is_checkpoint(recipe):
        recipe, checkpoint = None, recipe
    if checkpoint is not None:
        recipe = checkpoint_recipe(checkpoint, recipe, data, overrides)
    elif recipe is None:
        raise ValueError("compare needs a recipe or a checkpoint")
    elif not isinstance(recipe, Recipe) or overrides or data is not None:
        raw = recipe.to_dict() if isinstance(recipe, Recipe) else recipe
        if data is not None:
            raw = load_recipe(raw).to_dict()
            raw["data"] = data_section(data, raw["data"])
        recipe = load_recipe(raw, overrides)
    init = recipe.init
    if init.from_ is not None and (init.freeze_backbone or init.head_lr is not None):
        raise SetupError(
            "init.freeze_backbone and init.head_lr are not compared: zoo compare trains every tensor "
            "at the recipe's rate in both twins; remove them (init.from itself is honoured: both twins "
            f"start from {init.from_})"
        )
    return recipe


def check_memory(setup, *, training: bool, steps: int = 1) -> None:
    """Refuse, before any twin is built, a comparison whose estimated peak is more than the
    machine has available, saying what would fit: a smaller batch, fewer steps (each keeps its
    batch), or the forward check alone."""
    available = peak_memory.available_bytes()
    if available is None:  # nothing to compare against: no trace (peak_memory.check_training)
        return
    per_epoch = steps_per_epoch(len(setup.dataset.train), setup.batch_size)
    held = _batch_bytes(setup) if training else 0

    def estimate(batch: int, training: bool, steps: int = steps) -> peak_memory.Estimate:
        inputs = setup.dataset.train.x[:batch]
        kept = peak_memory.compared_batches(steps, per_epoch) if training else 0
        return peak_memory.compare_estimate(
            setup.recipe, setup.family, setup.config, inputs, fine_tune=setup.init is not None,
            training=training, kept_batches=kept, batch_bytes=held * batch // setup.batch_size,
        )  # fmt: skip

    wanted = estimate(setup.batch_size, training)
    if wanted.total <= available:
        return
    fits = []
    smaller = [b for b in (32, 16, 8, 4, 2, 1) if b < setup.batch_size]
    batch = next((b for b in smaller if estimate(b, training).total <= available), None)
    if batch is not None:
        fits.append(f"--batch-size {batch}")
    if training:
        fewer = next(
            (n for n in _fewer_steps(steps) if estimate(setup.batch_size, True, n).total <= available), None
        )
        if fewer is not None:
            fits.append(f"--steps {fewer} (each step keeps its batch)")
        forward = estimate(setup.batch_size, False)
        if forward.total <= available:
            about = peak_memory.gib(forward.total)
            fits.append(f"--forward-only (the weights, forward and gradients, about {about}; no training)")
    if not fits:
        fits.append("a machine with more memory: even the forward check alone does not fit")
    peak_memory.check_memory(wanted, fits, available)


def _batch_bytes(setup) -> int:
    """The tensors of one training batch as the torch pipeline yields it (the first: masks,
    padding and augmentation included)."""
    return tensor_bytes(tuple(next(iter(torch_loader(setup)))))


def _fewer_steps(steps: int) -> list[int]:
    """Step counts to offer instead of ``steps``, largest first: powers of ten below it."""
    return [n for n in (100_000, 10_000, 1_000, 100, 10, 1) if n < steps]


def explain_forward(sections: dict[str, SectionResult]) -> None:
    """A forward difference has a cause the other sections can name: a tensor that did not
    survive the copy, or else the tensor whose gradient differs most."""
    forward, weights, gradients = sections["forward"], sections["weights"], sections["gradients"]
    if forward.passed:
        return
    if not weights.passed:
        forward.reason += f"; {weights.details['worst_tensor']} already differs right after the copy"
    elif gradients.details.get("worst_tensor"):
        forward.reason += f"; the gradient that differs most is {gradients.details['worst_tensor']}'s"


def default_out(recipe: Recipe) -> Path:
    return RunDir.create(recipe.export.dir, f"compare-{recipe.name}-{time.strftime('%Y%m%d-%H%M%S')}").path


def build_report(setup, steps, threads, checkpointing, tolerances, sections, speed) -> dict[str, Any]:
    from zoo.keras.steps import onednn_words

    recipe, config = setup.recipe, setup.config
    passed = all(s.passed for s in sections.values())
    return {
        "recipe": recipe.name,
        "verdict": PASS if passed else "DIFFERS",
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "model": {
            "family": config.architecture,
            "preset": config.preset,
            "task": setup.task,
            "config": config.model_dump(mode="json"),
            "dropout_zeroed_for_parity": setup.zeroed,
        },
        "precision": setup.precision,
        "run": {
            "steps": steps,
            "batch_size": setup.batch_size,
            "seed": recipe.trainer.seed,
            "shuffle": recipe.data.shuffle,
            "data": recipe.data.name,
            "optimizer": recipe.optimizer.model_dump(mode="json"),
            "schedule": recipe.schedule.model_dump(mode="json"),
        },
        "device": "cpu",
        "threads": threads,
        "tensorflow_onednn": onednn_words(),  # TensorFlow is imported by now
        "gradient_checkpointing": {"requested": setup.gradient_checkpointing, **checkpointing},
        "versions": versions(),
        "reference_precision": reference_precision(setup.precision),
        "tolerances": tolerances.as_dict(),
        "notes": notes(setup, threads, checkpointing),
        "sections": {name: section.as_dict() for name, section in sections.items()},
        "speed": speed,
    }


def notes(setup, threads: dict[str, Any], checkpointing: dict[str, bool]) -> list[str]:
    """What the reader must know to trust (or discount) the numbers."""
    recipe = setup.recipe
    found = []
    if setup.zeroed:
        changed = ", ".join(f"{k} {v:g} -> 0" for k, v in setup.zeroed.items())
        found.append(
            f"dropout set to 0 in the parity sections ({changed}): the frameworks' dropout masks can "
            "never match; the speed section keeps the recipe's dropout"
        )
    else:
        found.append("dropout is 0 in this config, so the parity sections run it unchanged")
    if threads.get("tensorflow") != 1:
        found.append(f"TensorFlow threads: {threads['tensorflow']}; float sums may be ordered differently")
    if setup.gradient_checkpointing:
        where = [name for name, done in checkpointing.items() if done] or ["neither twin"]
        found.append(f"gradient checkpointing requested; enabled in {', '.join(where)}")
    if recipe.trainer.accumulate_grad_batches > 1:
        found.append(
            f"trainer.accumulate_grad_batches is {recipe.trainer.accumulate_grad_batches}; compare "
            "updates after every batch"
        )
    if recipe.trainer.world_size > 1 or recipe.trainer.strategy != "auto":
        found.append("compare runs on one device; the recipe's strategy and devices are not used")
    if setup.init is not None:
        found.append(f"both twins start from init.from: {setup.init.describe()}")
    if setup.adapter is not None:
        adapter = setup.adapter.adapter
        found.append(
            f"both twins hold the LoRA adapter {setup.adapter.path} ({len(adapter.points)} projections, "
            f"rank {'/'.join(map(str, sorted(set(adapter.ranks.values()))))}) on its base; only its "
            "tensors train"
        )
    if recipe.trainer.compile:
        found.append("trainer.compile is off in compare: both twins run eagerly / traced without XLA")
    found.append(
        "training runs each trainer's own step: the Lightning task zoo trains with (its loss, "
        "optimizer and scheduler) in Lightning's Trainer on zoo's DataLoader, and the Keras model "
        "compiled as zoo's trainer compiles it, train_on_batch on zoo's tf.data batches"
    )
    return found


def versions() -> dict[str, str]:
    found = {}
    for name in ("torch", "lightning", "tensorflow", "keras", "numpy"):
        try:
            found[name] = version(name)
        except PackageNotFoundError:
            continue
    return found
