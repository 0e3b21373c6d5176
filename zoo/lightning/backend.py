"""The Lightning backend: :class:`zoo.backend.Backend` over zoo.lightning.trainer's loop (its step
from the step kit, zoo.lightning.steps)."""

from __future__ import annotations

from typing import Any

import numpy as np

from zoo.backend import Backend, one_device
from zoo.checkpoint.tensors import load_torch
from zoo.hardware import check_trainer, kernel_threads, resolve_accelerator
from zoo.initial_weights import seeded_torch_model
from zoo.precision import lightning_precision


class LightningBackend(Backend):
    name = "lightning"
    state_suffix = "ckpt"  # Lightning's own checkpoint of the whole loop (weights_only loadable)
    packages = ("torch", "lightning")

    def build(self, family, config, seed: int | None = None) -> Any:
        return family.build_torch(config) if seed is None else seeded_torch_model(family, config, seed)

    def load(self, checkpoint) -> Any:
        return load_torch(checkpoint)

    def fit(self, plan) -> tuple[Any, dict[str, float]]:
        from zoo.lightning.trainer import fit

        return fit(plan)

    def evaluate(self, model, dataset, trainer, batch_size: int) -> dict[str, float]:
        from zoo.lightning.data import loader
        from zoo.lightning.task import TASKS

        tester = evaluation_trainer(trainer)
        pin = resolve_accelerator(trainer.accelerator) == "gpu"  # as fit does
        smoothing = trainer.label_smoothing
        task = TASKS[dataset.task](
            model,
            None,
            None,
            metric=dataset.metrics[0],
            label_smoothing=smoothing,
            extra=tuple(trainer.metrics),
        )
        results = tester.test(task, loader(dataset.test, batch_size, pin_memory=pin), verbose=False)[0]
        return {k: float(v) for k, v in results.items()}

    def state_problem(self, path) -> str | None:
        import torch

        # Read whole, as Lightning will: a memory-mapped load leaves each tensor's bytes unread, and a
        # storage whose size no longer matches its record surfaces only in Lightning's own load.
        loaded = torch.load(path, map_location="cpu", weights_only=True)
        needed = {  # what Lightning's restore reads
            "state_dict", "optimizer_states", "lr_schedulers", "loops", "global_step", "epoch", "callbacks",
            "pytorch-lightning_version",
        }  # fmt: skip
        if not isinstance(loaded, dict) or not needed <= loaded.keys():
            return f"Lightning's {', '.join(sorted(needed))} are not all there"
        return None

    def predict(self, model, inputs: np.ndarray, batch_size: int = 256) -> np.ndarray:
        import torch

        device = next(model.parameters()).device
        model.eval()
        outputs = []
        with torch.no_grad():
            for start in range(0, len(inputs), batch_size):
                batch = torch.from_numpy(np.ascontiguousarray(inputs[start : start + batch_size]))
                outputs.append(model(batch.to(device)).float().cpu().numpy())
        return np.concatenate(outputs)


def evaluation_trainer(trainer_cfg):
    """A Trainer for ``test`` on the recipe's accelerator and in its precision (:func:`one_device`)."""
    import lightning as L
    import torch

    from zoo.lightning.steps import quiet
    from zoo.lightning.trainer import check_accelerator

    trainer_cfg = one_device(trainer_cfg)
    check_trainer(trainer_cfg)  # float16 or a GPU this machine lacks: said in zoo's words
    torch.set_num_threads(kernel_threads(trainer_cfg))  # as training chooses them (and Keras' evaluate)
    quiet()
    return L.Trainer(
        accelerator=check_accelerator(trainer_cfg), devices=1, logger=False,
        precision=lightning_precision(trainer_cfg.precision),
        enable_checkpointing=False, enable_model_summary=False, enable_progress_bar=False,
    )  # fmt: skip
