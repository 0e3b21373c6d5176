"""torch optimizers and the per-step learning-rate table from a recipe."""

from __future__ import annotations

import torch


def build_optimizer(cfg, parameters) -> torch.optim.Optimizer:
    if cfg.name == "sgd":
        return torch.optim.SGD(
            parameters, lr=cfg.lr, momentum=cfg.momentum, nesterov=cfg.nesterov,
            weight_decay=cfg.weight_decay,
        )  # fmt: skip
    kind = {"adam": torch.optim.Adam, "adamw": torch.optim.AdamW}[cfg.name]
    return kind(parameters, lr=cfg.lr, betas=cfg.betas, eps=cfg.eps, weight_decay=cfg.weight_decay)


def build_scheduler(optimizer: torch.optim.Optimizer, table, base_lr: float):
    """``LambdaLR`` reading zoo's table: the rate of update ``s`` is ``table[s]``. Each factor
    is divided out as it is asked for: a list of them would hold 32 bytes a step (90 MB for an
    epoch of 3 million steps), an array another copy of the table."""
    last = len(table) - 1
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: float(table[min(step, last)]) / base_lr)
