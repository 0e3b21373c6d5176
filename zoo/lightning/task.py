"""LightningModules that wrap a plain torch twin with a task's loss, metrics and optimizer."""

from __future__ import annotations

import math

import lightning as L
import torch
import torch.nn.functional as F

from zoo.lightning.optim import build_optimizer, build_scheduler


class Task(L.LightningModule):
    """Shared training/validation/test logic; subclasses define ``loss_and_metrics``."""

    def __init__(self, model: torch.nn.Module, optimizer_cfg, lr_table, compiled: bool = False, groups=None):
        super().__init__()
        self.model = model
        self.groups = groups
        self.optimizer_cfg = optimizer_cfg
        self.lr_table = lr_table
        # The compiled wrapper shares the model's parameters; the plain module stays the one
        # that is exported, so checkpoint names never get torch.compile's prefix.
        self.net = torch.compile(model) if compiled else model

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def loss_and_metrics(self, batch) -> tuple[torch.Tensor, dict[str, torch.Tensor], int]:
        raise NotImplementedError

    def _step(self, batch, stage: str) -> torch.Tensor:
        loss, metrics, n = self.loss_and_metrics(batch)
        sync = self.trainer.world_size > 1
        for name, value in {"loss": loss, **metrics}.items():
            self.log(
                f"{stage}_{name}",
                value,
                on_step=False,
                on_epoch=True,
                prog_bar=True,
                batch_size=n,
                sync_dist=sync,
            )
        return loss

    def training_step(self, batch, batch_idx):
        return self._step(batch, "train")

    def validation_step(self, batch, batch_idx):
        self._step(batch, "val")

    def test_step(self, batch, batch_idx):
        self._step(batch, "test")

    def configure_optimizers(self):
        optimizer = build_optimizer(self.optimizer_cfg, self.groups or self.model.parameters())
        scheduler = build_scheduler(optimizer, self.lr_table, self.optimizer_cfg.lr)
        return {
            "optimizer": optimizer,
            "lr_scheduler": {"scheduler": scheduler, "interval": "step"},
        }


class ClassificationTask(Task):
    def loss_and_metrics(self, batch):
        x, y = batch
        logits = self(x)
        loss = F.cross_entropy(logits, y)
        accuracy = (logits.argmax(-1) == y).float().mean()
        return loss, {"accuracy": accuracy}, len(y)


class LanguageModelTask(Task):
    """Next-token cross-entropy over every position; bits per character = loss / ln 2."""

    def loss_and_metrics(self, batch):
        x, y = batch
        logits = self(x)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
        return loss, {"bpc": loss / math.log(2)}, len(y)


TASKS = {"classification": ClassificationTask, "language_modeling": LanguageModelTask}
