"""One optimizer recipe means one algorithm: Keras' updates equal torch.optim's."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from zoo.keras.optimizers import build_optimizer as keras_optimizer
from zoo.lightning.optim import build_optimizer as torch_optimizer
from zoo.recipe import SGD, Adam, AdamW, Cosine
from zoo.schedule import lr_table

CASES = [
    SGD(lr=0.05),
    SGD(lr=0.05, momentum=0.9),
    SGD(lr=0.05, momentum=0.9, nesterov=True, weight_decay=1e-2),
    Adam(lr=1e-2),
    Adam(lr=1e-2, weight_decay=1e-2, eps=1e-6),
    AdamW(lr=1e-2, weight_decay=0.1),
]


@pytest.mark.parametrize("cfg", CASES, ids=lambda c: c.model_dump_json())
def test_keras_and_torch_updates_match(cfg):
    import keras

    steps = 60
    rng = np.random.default_rng(0)
    start = rng.normal(size=(5, 3)).astype(np.float32)
    target = rng.normal(size=(5, 3)).astype(np.float32)
    noise = rng.normal(size=(steps, 5, 3)).astype(np.float32) * 0.1
    table = lr_table(Cosine(warmup_steps=5), cfg.lr, steps_per_epoch=steps, epochs=1)

    param = torch.nn.Parameter(torch.from_numpy(start.copy()))
    t_opt = torch_optimizer(cfg, [param])
    t_sched = torch.optim.lr_scheduler.LambdaLR(t_opt, lambda s: float(table[min(s, steps - 1)]) / cfg.lr)
    variable = keras.Variable(start.copy())
    k_opt = keras_optimizer(cfg, table)
    for step in range(steps):
        t_grad = param.detach().numpy() - target + noise[step]  # weight-dependent: drift would compound
        param.grad = torch.from_numpy(t_grad)
        t_opt.step()
        t_sched.step()
        k_grad = variable.numpy() - target + noise[step]
        k_opt.apply_gradients([(k_grad, variable)])
    np.testing.assert_allclose(variable.numpy(), param.detach().numpy(), rtol=0, atol=5e-7)


def test_adam_with_a_constant_rate_matches_torch():
    """A float rate is one Keras variable for every step: nothing computed for one update
    (Adam's bias corrections) may be reused by the next."""
    import keras

    from zoo.keras.optimizers import TorchAdam

    rng = np.random.default_rng(1)
    start, target = (rng.normal(size=(4,)).astype(np.float32) for _ in range(2))
    param = torch.nn.Parameter(torch.from_numpy(start.copy()))
    t_opt = torch.optim.Adam([param], lr=0.1)
    variable = keras.Variable(start.copy())
    k_opt = TorchAdam(0.1)
    for _ in range(5):
        param.grad = param.detach() - torch.from_numpy(target)
        t_opt.step()
        k_opt.apply_gradients([(variable.numpy() - target, variable)])
    np.testing.assert_allclose(variable.numpy(), param.detach().numpy(), rtol=0, atol=1e-6)
