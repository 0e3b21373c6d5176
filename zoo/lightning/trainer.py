"""Train a torch twin with Lightning's Trainer, as a recipe says."""

from __future__ import annotations

import logging
import time
import warnings

import lightning as L
import torch

from zoo.data import Dataset, steps_per_epoch
from zoo.lightning.callbacks import EpochMetrics
from zoo.lightning.data import loader
from zoo.lightning.task import TASKS
from zoo.runs import MetricsLog, RunDir
from zoo.schedule import lr_table

# zoo's loaders index whole batches in the main process on purpose: workers would only
# add inter-process copies for in-memory arrays.
warnings.filterwarnings("ignore", ".*does not have many workers.*")
warnings.filterwarnings("ignore", ".*`isinstance\\(treespec, LeafSpec\\)` is deprecated.*")


def quiet() -> None:
    for name in ("lightning.pytorch.utilities.rank_zero", "lightning.pytorch.accelerators.cuda"):
        logging.getLogger(name).setLevel(logging.WARNING)


def fit(recipe, config, family, dataset: Dataset, run: RunDir):
    """Train, validate every epoch, test; return the trained twin and the test metrics."""
    quiet()
    trainer_cfg = recipe.trainer
    if trainer_cfg.num_threads:
        torch.set_num_threads(trainer_cfg.num_threads)
    L.seed_everything(trainer_cfg.seed, verbose=False)
    model = family.build_torch(config)
    data_cfg = recipe.data
    steps = steps_per_epoch(len(dataset.train), data_cfg.batch_size)
    table = lr_table(recipe.schedule, recipe.optimizer.lr, steps, trainer_cfg.max_epochs)
    task = TASKS[dataset.task](model, recipe.optimizer, table)
    trainer = L.Trainer(
        max_epochs=trainer_cfg.max_epochs,
        accelerator=trainer_cfg.accelerator,
        devices=trainer_cfg.devices,
        precision=trainer_cfg.precision,
        deterministic=trainer_cfg.deterministic,
        logger=False,
        enable_checkpointing=False,
        enable_model_summary=False,
        enable_progress_bar=trainer_cfg.progress_bar,
        num_sanity_val_steps=0,
        callbacks=[EpochMetrics(MetricsLog(run.metrics, dataset.task))],
        default_root_dir=run.path,
    )
    train_loader = loader(dataset.train, data_cfg.batch_size, trainer_cfg.seed, data_cfg.shuffle)
    val_loader = loader(dataset.val, data_cfg.eval_batch_size) if len(dataset.val) else None
    started = time.perf_counter()
    trainer.fit(task, train_loader, val_loader)
    seconds = time.perf_counter() - started
    results = trainer.test(task, loader(dataset.test, data_cfg.eval_batch_size), verbose=False)[0]
    model.eval()
    return model, {**{k: float(v) for k, v in results.items()}, "train_seconds": seconds}
