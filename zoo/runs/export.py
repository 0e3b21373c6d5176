"""A run's model written as the run exports it: the common checkpoint (``model.safetensors``), or
the adapter alone for a LoRA run (``adapter.safetensors``). The last epoch's at the run's end
(zoo.api) and, with ``trainer.early_stopping``, the best epoch's as it is reached
(``model.best.safetensors``, ``adapter.best.safetensors``: zoo.early_stopping)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from zoo.backend import save_checkpoint
from zoo.lora import save_adapter
from zoo.runs.stops import check_run_folder

if TYPE_CHECKING:
    from zoo.plan import RunPlan

BEST_SUFFIX = ".best"


def best_of(checkpoint: Path) -> Path:
    """The best epoch's file beside the last one's: ``model.safetensors`` -> ``model.best.safetensors``."""
    return checkpoint.with_name(f"{checkpoint.stem}{BEST_SUFFIX}{checkpoint.suffix}")


def write_model(plan: RunPlan, model: Any, metrics: dict[str, float], best: bool = False) -> Path:
    """Export ``model`` (either twin) into the plan's run folder with ``metrics`` in its metadata;
    ``best``: under the best epoch's name. Returns the file written."""
    run, recipe = plan.run, plan.recipe
    check_run_folder(run.path)  # a folder deleted under the run is not recreated to hold its checkpoint
    if recipe.init.lora is not None:  # the adapter alone, naming its base
        init = recipe.init
        base = {"path": str(init.from_.resolve())} if init.from_ else {"seed": recipe.trainer.seed}
        last = run.path / "adapter.safetensors"
        path = best_of(last) if best else last
        return save_adapter(
            model, path, base, recipe=recipe.to_dict(), metrics=metrics, vocab=plan.dataset.vocab
        )
    path = best_of(run.checkpoint) if best else run.checkpoint
    return save_checkpoint(
        model, path, recipe=recipe.to_dict(), metrics=metrics, vocab=plan.dataset.vocab,
        dtype=recipe.export.dtype, preprocessing=plan.preprocessing,
    )  # fmt: skip


def best_exporter(plan: RunPlan):
    """What an early-stopping callback calls at a new best epoch: ``export(model, epoch, monitor,
    value)``; None where this process writes no files (another rank of a data-parallel run)."""
    if plan.run is None:
        return None

    def export(model: Any, epoch: int, monitor: str, value: float) -> Path:
        return write_model(plan, model, {monitor: float(value), "epoch": float(epoch)}, best=True)

    return export
