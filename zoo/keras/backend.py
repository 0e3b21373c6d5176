"""The Keras backend: :class:`zoo.backend.Backend` over zoo.keras.trainer's compile/fit (its step
from the step kit, zoo.keras.steps)."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
from safetensors import safe_open

from zoo import registry
from zoo.backend import Backend, one_device
from zoo.checkpoint.tensors import load_keras, model_tensors
from zoo.hardware import check_trainer
from zoo.initial_weights import seeded_keras_model


class KerasBackend(Backend):
    name = "keras"
    state_suffix = "safetensors"  # zoo's own file: variables, optimizer slots, loop position
    packages = ("tensorflow", "keras")

    def build(self, family, config, seed: int | None = None) -> Any:
        return family.build_keras(config) if seed is None else seeded_keras_model(family, config, seed)

    def load(self, checkpoint) -> Any:
        return load_keras(checkpoint)

    def fit(self, plan) -> tuple[Any, dict[str, float]]:
        from zoo.keras.trainer import fit

        return fit(plan)

    def evaluate(self, model, dataset, trainer, batch_size: int) -> dict[str, float]:
        from zoo.keras.data import eval_dataset
        from zoo.keras.steps import compile_for, for_batches
        from zoo.keras.trainer import configure
        from zoo.nn.keras.precision import build_keras

        trainer = one_device(trainer)
        check_trainer(trainer)
        configure(trainer)
        family = registry.get_family(model.zoo_config.architecture)
        if trainer.precision != "32-true":  # the twin as a run of this recipe would have trained it
            model = build_keras(family, model.zoo_config, trainer.precision, model_tensors(model))
        model = for_batches(model, dataset)
        compile_for(
            model, dataset.task, optimizer="sgd", metric=dataset.metrics[0],
            smoothing=trainer.label_smoothing, extra=tuple(trainer.metrics),
        )  # fmt: skip
        test = eval_dataset(dataset.test, batch_size, family.input_kind)
        results = model.evaluate(test, verbose=0, return_dict=True)
        return {f"test_{k}": float(v) for k, v in results.items()}

    def state_problem(self, path) -> str | None:
        with safe_open(str(path), framework="np") as handle:
            position = json.loads((handle.metadata() or {}).get("position", "null"))
            keys = list(handle.keys())
        fields = ("batches_done", "epoch", "batch")
        if not isinstance(position, dict) or not all(isinstance(position.get(f), int) for f in fields):
            return "its loop position (metadata 'position') is missing or not whole numbers"
        if not any(k.startswith("model/") for k in keys):
            return "it holds no model variables"
        return None

    def predict(self, model, inputs: np.ndarray, batch_size: int = 256) -> np.ndarray:
        from zoo.keras.data import keras_layout

        kind = registry.get_family(model.zoo_config.architecture).input_kind
        outputs = model.predict(keras_layout(inputs, kind), batch_size=batch_size, verbose=0)
        return np.asarray(outputs, dtype=np.float32)
