"""torch optimizers and the per-step learning-rate table from a recipe."""

from __future__ import annotations

import numpy as np
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
    """``LambdaLR`` reading zoo's table: the rate of update ``s`` is ``table[s]``. The factors
    stay a float64 array (the same doubles as Python's division gives): a list of Python
    floats would hold 32 bytes a step, 90 MB for an epoch of 3 million steps."""
    last = len(table) - 1
    factors = np.asarray(table, dtype=np.float64) / base_lr
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: float(factors[min(step, last)]))
