"""The resnet family is torchvision's ResNet: same weights in, same logits out, in both frameworks.

The oracle is ``tests/reference/torchvision_resnet.py``, run once in the reference environment:
torchvision's resnet18 and resnet50 (10 classes) with every BatchNorm tensor randomised, written
as ``.pth``, ``.safetensors`` and timm's own directory (``model.safetensors`` + ``config.json``), with
both libraries' logits on a 2 x 3 x 64 x 64 batch. Those files go through ``zoo import``
(:func:`zoo.interchange.importing.import_checkpoint`) into zoo checkpoints that each twin loads.

Tolerance: relative error in the max norm, ``max |zoo - reference| / max |reference|`` over the
whole logits array, at most 1e-4, in eval mode and in train mode (batch statistics). Measured:
the torch twin is bit-identical to both libraries (0.0); the Keras twin is within 2e-6 in eval
mode and, in train mode, 3e-6 (resnet18) and 3.6e-5 (resnet50). The latter is the conditioning
of train-mode BatchNorm on this small batch (layer4 normalises 2 x 2 x 2 values per channel):
torchvision's own float32 logits are 3.6e-5 from its float64 ones there.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest
import reference_env
import safetensors.numpy
import torch
from conftest import forward_keras, forward_torch, relative_error, twins

import zoo
from zoo import registry
from zoo.checkpoint.tensors import load_tensors, model_tensors
from zoo.interchange.exporting import export_checkpoint
from zoo.interchange.foreign_files import read_foreign
from zoo.interchange.importing import import_checkpoint
from zoo.keras.data import keras_layout

REFERENCE = 1e-4  # relative, max norm: zoo's twins against torchvision / timm
TWINS = 1e-5  # relative, max norm: zoo's torch twin against its Keras twin (float32)
FAMILY = registry.get_family("resnet")
# (preset, library, file the reference wrote); a directory is timm's, with its config.json.
SOURCES = [
    ("resnet18", "torchvision", "resnet18.pth"),
    ("resnet18", "torchvision", "resnet18.safetensors"),
    ("resnet18", "timm", "resnet18-timm"),
    ("resnet50", "torchvision", "resnet50.pth"),
    ("resnet50", "timm", "resnet50-timm"),
]


@pytest.fixture(scope="module")
def reference() -> Path:
    return reference_env.fixtures("torchvision_resnet.py")


def run_reference(out: Path, *args: str) -> Path:
    return reference_env.run("torchvision_resnet.py", out, *args)


def randomise_batchnorm(tensors: dict[str, np.ndarray], seed: int) -> dict[str, np.ndarray]:
    """Every BatchNorm tensor random (weight, bias, running statistics, batch counter), so that no
    mapping error hides behind the 1s and 0s BatchNorm starts from."""
    rng = np.random.default_rng(seed)
    out = dict(tensors)
    for name, value in tensors.items():
        if name.endswith("num_batches_tracked"):
            out[name] = np.asarray(rng.integers(1, 10_000), dtype=np.int64)
        elif name.endswith("running_var"):
            out[name] = rng.uniform(0.5, 2.0, value.shape).astype(np.float32)
        elif name.endswith(("running_mean", ".bias")) or (name.endswith(".weight") and value.ndim == 1):
            centre = 1.0 if name.endswith(".weight") else 0.0
            out[name] = (centre + 0.2 * rng.normal(size=value.shape)).astype(np.float32)
    return out


# ------------------------------------------------------------------------- against the reference


def test_parameter_counts_are_torchvisions_and_timms(reference):
    counts = json.loads((reference / "counts.json").read_text())
    listed = {entry.name: entry.parameters for entry in registry.list_architectures()}
    assert set(counts["torchvision"]) == {p.name for p in FAMILY.presets} - {"resnet-micro"}  # zoo's own
    for name, expected in counts["torchvision"].items():
        assert listed[name] == expected == counts["timm"][name], name
    assert listed["resnet"] == counts["torchvision"]["resnet18"]  # the family's defaults are resnet18


@pytest.mark.parametrize(
    ("key", "name", "fields"),
    [("resnet18", "resnet18", {}), ("resnet50-zero-init-residual", "resnet50", {"zero_init_residual": True})],
)
def test_torch_twin_initialises_bit_for_bit_as_torchvision(reference, key, name, fields):
    expected = json.loads((reference / "init.json").read_text())[key]
    torch.manual_seed(0)
    model = FAMILY.build_torch(registry.resolve_config(name, num_classes=10, **fields))
    state = model.state_dict()
    assert list(state) == list(expected)
    got = {k: hashlib.sha256(v.contiguous().numpy().tobytes()).hexdigest() for k, v in state.items()}
    assert [k for k in got if got[k] != expected[k]] == []


@pytest.mark.parametrize(("name", "library", "source"), SOURCES, ids=[s[2] for s in SOURCES])
def test_imported_weights_give_the_reference_logits(reference, tmp_path, name, library, source):
    # No format named: a file is read as torchvision's, a directory with timm's config.json as timm's.
    imported = import_checkpoint(reference / source, tmp_path / "imported")
    assert (imported.family.name, imported.format.name) == ("resnet", library)
    assert imported.config.model_dump(include={"block", "layers"}) == registry.resolve_config(
        name
    ).model_dump(include={"block", "layers"})
    x = np.load(reference / "inputs.npy")
    torch_model = zoo.load_checkpoint(imported.path, framework="lightning")
    keras_model = zoo.load_checkpoint(imported.path, framework="keras")
    for mode in ("eval", "train"):  # train last: it moves the running statistics
        expected = np.load(reference / f"{name}-{library}-{mode}.npy")
        training = mode == "train"
        assert relative_error(forward_torch(torch_model, x, training), expected) <= REFERENCE, mode
        assert relative_error(forward_keras(keras_model, x, FAMILY, training), expected) <= REFERENCE, mode
    # The running statistics and batch counters after one train-mode pass are torchvision's too.
    after = safetensors.numpy.load_file(reference / f"{name}-after-train.safetensors")
    for twin in (torch_model, keras_model):
        tensors = model_tensors(twin)
        for key, value in after.items():
            if key.endswith("num_batches_tracked"):
                assert tensors[key] == value, key
            else:
                assert relative_error(tensors[key], value) <= REFERENCE, key


@pytest.mark.parametrize(
    ("source", "library"),
    [
        ("resnet18.pth", "torchvision"),
        ("resnet18.safetensors", "torchvision"),
        ("resnet18-timm", "timm"),
    ],
)
def test_import_then_export_is_bit_identical(reference, tmp_path, source, library):
    imported = import_checkpoint(reference / source, tmp_path / "imported")
    target = tmp_path / ("exported" + Path(source).suffix if library == "torchvision" else "exported")
    export_checkpoint(imported.path, library, target)
    original, meta = read_foreign(reference / source)
    exported, exported_meta = read_foreign(target)
    assert list(exported) == list(original) if source.endswith(".pth") else set(exported) == set(original)
    changed = [
        k
        for k, v in original.items()
        if exported[k].dtype != v.dtype
        or exported[k].shape != v.shape
        or exported[k].tobytes() != v.tobytes()
    ]
    assert changed == []
    if library == "timm":  # timm's own config.json and zoo's describe the same model
        for key in ("architecture", "num_classes", "num_features", "global_pool"):
            assert exported_meta[key] == meta[key], key
        assert exported_meta["model_args"] == meta["model_args"]


def test_exports_load_in_torchvision_and_timm_with_the_same_logits(reference, tmp_path):
    """zoo -> torchvision (``resnet50().load_state_dict(strict=True)``, from .pth and .safetensors)
    and -> timm (``local-dir:`` and ``pretrained_cfg_overlay=dict(file=...)``): zoo's logits."""
    torch.manual_seed(0)
    torch_model = FAMILY.build_torch(registry.resolve_config("resnet50", num_classes=7))
    load_tensors(torch_model, randomise_batchnorm(model_tensors(torch_model), seed=3))
    checkpoint = zoo.save_checkpoint(torch_model, tmp_path / "zoo.safetensors")
    paths = [
        export_checkpoint(checkpoint, "torchvision", tmp_path / "torchvision.pth"),
        export_checkpoint(checkpoint, "torchvision", tmp_path / "torchvision.safetensors"),
        export_checkpoint(checkpoint, "timm", tmp_path / "timm").parent,
    ]
    x = np.load(reference / "inputs.npy")
    out = run_reference(
        tmp_path / "logits", "exported", "resnet50", str(reference / "inputs.npy"), *map(str, paths)
    )
    expected = forward_torch(torch_model, x, training=False)
    written = ["0-torchvision", "1-torchvision", "2-timm-local-dir", "2-timm-file"]
    for stem in written:
        assert relative_error(np.load(out / f"{stem}.npy"), expected) <= REFERENCE, stem


# ------------------------------------------------------------------------------------ config


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"layers": [2, 2, 2]}, r"block count of each of ResNet's 4 stages .* got 3: \[2, 2, 2\]"),
        ({"layers": [2, 0, 2, 2]}, "greater than or equal to 1"),
        ({"block": "wide"}, "'basic' or 'bottleneck'"),
    ],
)
def test_invalid_configs_are_refused_with_what_would_work(fields, message):
    with pytest.raises(ValueError, match=message):
        registry.resolve_config("resnet", **fields)


def test_config_arithmetic_follows_torch():
    for fields in ({"image_size": 224}, {"image_size": 37}, {"image_size": 32, "stem": "small"}):
        config = registry.resolve_config("resnet", width=4, **fields)
        model = FAMILY.build_torch(config).eval()
        with torch.no_grad():
            features = model.forward_features(torch.from_numpy(config.example_input(1)))
        assert tuple(features.shape) == (1, config.num_features, config.feature_size(), config.feature_size())


# ------------------------------------------------------------------------- twin against twin


def _twin_parity(config, torch_model, keras_model, batch: int = 2) -> None:
    x = config.example_input(batch, seed=5)
    for training in (False, True):
        expected = forward_torch(torch_model, x, training)
        assert relative_error(forward_keras(keras_model, x, FAMILY, training), expected) <= TWINS, training
    torch_state, keras_state = model_tensors(torch_model), model_tensors(keras_model)
    for key, value in torch_state.items():
        assert np.allclose(keras_state[key], value, rtol=TWINS, atol=TWINS * max(1.0, np.abs(value).max())), (
            key
        )


def test_small_stem_twins_agree_at_32x32():
    config = registry.resolve_config("resnet18", stem="small", image_size=32, num_classes=10)
    torch.manual_seed(0)
    tensors = randomise_batchnorm(model_tensors(FAMILY.build_torch(config)), seed=1)
    _, torch_model, keras_model = twins("resnet18", tensors, stem="small", image_size=32, num_classes=10)
    assert isinstance(torch_model.maxpool, torch.nn.Identity) and keras_model.maxpool is None
    assert torch_model.conv1.kernel_size == (3, 3) and torch_model.conv1.stride == (1, 1)
    _twin_parity(config, torch_model, keras_model)


@pytest.mark.parametrize("block", ["basic", "bottleneck"])
def test_zero_init_residual_in_both_twins(block):
    fields = {
        "block": block,
        "layers": [1, 2, 1, 1],
        "width": 8,
        "image_size": 32,
        "zero_init_residual": True,
    }
    config = registry.resolve_config("resnet", **fields)
    last = "bn2" if block == "basic" else "bn3"
    for own in (FAMILY.build_torch(config), FAMILY.build_keras(config)):  # each twin's own initialisation
        weights = {k: v for k, v in model_tensors(own).items() if k.endswith(".weight") and v.ndim == 1}
        zeroed = sorted(k for k, v in weights.items() if not v.any())
        assert zeroed == sorted(f"{b}.{last}.weight" for b in _block_names(config))
        assert all((v == 1).all() for k, v in weights.items() if k not in zeroed)
    _, torch_model, keras_model = twins("resnet", **fields)
    _twin_parity(config, torch_model, keras_model)


def _block_names(config) -> list[str]:
    return [f"layer{s + 1}.{i}" for s in range(4) for i in range(config.layers[s])]


def test_timm_interface_in_both_twins():
    config, torch_model, keras_model = twins(
        "resnet", block="bottleneck", layers=[1, 1, 1, 1], width=4, image_size=64
    )
    x = config.example_input(2, seed=1)
    torch_model.eval()
    with torch.no_grad():
        features = torch_model.forward_features(torch.from_numpy(x))
        pooled = torch_model.forward_head(features, pre_logits=True)
        assert torch.equal(torch_model.forward_head(features), torch_model(torch.from_numpy(x)))
    assert tuple(pooled.shape) == (2, config.num_features)
    keras_features = keras_model.forward_features(keras_layout(x, "image"))
    assert tuple(keras_features.shape) == (2, 2, 2, config.num_features)
    np.testing.assert_allclose(
        np.asarray(keras_features).transpose(0, 3, 1, 2), features.numpy(), rtol=TWINS, atol=TWINS
    )
    np.testing.assert_allclose(
        np.asarray(keras_model.forward_head(keras_features, pre_logits=True)),
        pooled.numpy(),
        rtol=TWINS,
        atol=TWINS,
    )


# ---------------------------------------------------------------------- gradient checkpointing

CHECKPOINTED = [
    {"block": "basic", "layers": [1, 2, 1, 1], "width": 8, "stem": "small", "image_size": 8},
    {"block": "bottleneck", "layers": [1, 1, 2, 1], "width": 4, "image_size": 32},
]


@pytest.fixture
def checkpointed_blocks(monkeypatch):
    """Counts the block runs under checkpointing: torch's checkpoint calls, Keras' rematerialised runs."""
    import zoo.nn.keras.remat
    import zoo.nn.torch.remat

    calls = {"torch": 0, "keras": 0}
    checkpoint, recompute = zoo.nn.torch.remat.checkpoint, zoo.nn.keras.remat.recompute_grad

    def counting_checkpoint(*args, **kwargs):
        calls["torch"] += 1
        return checkpoint(*args, **kwargs)

    def counting_recompute(fn):
        def counted(*args):
            calls["keras"] += 1
            return fn(*args)

        return recompute(counted)

    monkeypatch.setattr(zoo.nn.torch.remat, "checkpoint", counting_checkpoint)
    monkeypatch.setattr(zoo.nn.keras.remat, "recompute_grad", counting_recompute)
    return calls


def _torch_step(model, x, checkpointing: bool):
    before = {k: v.clone() for k, v in model.state_dict().items()}
    model.set_grad_checkpointing(checkpointing)
    model.train().zero_grad(set_to_none=True)
    (model(x) ** 2).sum().backward()
    grads = {n: p.grad.numpy().copy() for n, p in model.named_parameters()}
    after = {k: v.numpy().copy() for k, v in model.state_dict().items()}
    model.load_state_dict(before)
    return grads, after


def _keras_step(model, x, checkpointing: bool, graph: bool):
    import tensorflow as tf

    before = [v.numpy() for v in model.variables]
    model.set_grad_checkpointing(checkpointing)

    def step(x):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(model(x, training=True) ** 2)
        return tape.gradient(loss, model.trainable_variables)

    grads = [np.asarray(g) for g in (tf.function(step) if graph else step)(x)]
    after = [v.numpy() for v in model.variables]
    for variable, value in zip(model.variables, before, strict=True):
        variable.assign(value)
    return grads, after


def _max_gap(a, b) -> float:
    pairs = zip(a.values(), b.values(), strict=True) if isinstance(a, dict) else zip(a, b, strict=True)
    return max(float(np.max(np.abs(np.asarray(u, np.float64) - np.asarray(v, np.float64)))) for u, v in pairs)


@pytest.mark.parametrize("fields", CHECKPOINTED, ids=["basic-small-stem", "bottleneck"])
def test_gradient_checkpointing_changes_no_gradient(fields, checkpointed_blocks):
    config, torch_model, keras_model = twins("resnet", tensors=None, **fields)
    assert FAMILY.grad_checkpointing == ("lightning", "keras")
    blocks = sum(config.layers)
    x = config.example_input(4, seed=1)
    plain, plain_state = _torch_step(torch_model, torch.from_numpy(x), checkpointing=False)
    checkpointed, checkpointed_state = _torch_step(torch_model, torch.from_numpy(x), checkpointing=True)
    assert checkpointed_blocks["torch"] == blocks
    assert _max_gap(plain, checkpointed) <= 1e-6
    assert _max_gap(plain_state, checkpointed_state) <= 1e-6  # BatchNorm statistics updated once
    for graph in (False, True):
        checkpointed_blocks["keras"] = 0
        plain, plain_state = _keras_step(keras_model, keras_layout(x, "image"), False, graph)
        checkpointed, checkpointed_state = _keras_step(keras_model, keras_layout(x, "image"), True, graph)
        assert checkpointed_blocks["keras"] == 2 * blocks  # each block: forward and recompute
        assert _max_gap(plain, checkpointed) <= 1e-6
        assert _max_gap(plain_state, checkpointed_state) <= 1e-6


def test_strided_1x1_convolution_matches_torch_in_both_directions():
    """The shortcut's 1x1 stride-2 convolution, at a shape whose oneDNN filter gradient corrupts
    TensorFlow's heap (see ``zoo.nn.keras.Conv2D``): the Keras twin's output and gradients are torch's."""
    import tensorflow as tf

    from architectures.resnet.keras_model import TorchConv2D

    rng = np.random.default_rng(0)
    x = rng.normal(size=(2, 8, 56, 56)).astype(np.float32)
    weight = rng.normal(size=(8, 8, 1, 1)).astype(np.float32)
    upstream = rng.normal(size=(2, 8, 28, 28)).astype(np.float32)
    x_t, weight_t = torch.from_numpy(x).requires_grad_(), torch.from_numpy(weight).requires_grad_()
    y_t = torch.nn.functional.conv2d(x_t, weight_t, stride=2)
    (y_t * torch.from_numpy(upstream)).sum().backward()

    layer = TorchConv2D(8, 1, 2)
    x_k = tf.constant(keras_layout(x, "image"))
    layer.build(x_k.shape)
    layer.kernel.assign(weight.transpose(2, 3, 1, 0))
    with tf.GradientTape() as tape:
        tape.watch(x_k)
        y_k = layer(x_k)
        loss = tf.reduce_sum(y_k * upstream.transpose(0, 2, 3, 1))
    grad_x, grad_kernel = tape.gradient(loss, [x_k, layer.kernel])
    for got, expected in [
        (np.asarray(y_k).transpose(0, 3, 1, 2), y_t.detach().numpy()),
        (np.asarray(grad_x).transpose(0, 3, 1, 2), x_t.grad.numpy()),
        (np.asarray(grad_kernel).transpose(3, 2, 0, 1), weight_t.grad.numpy()),
    ]:
        assert relative_error(got, expected) <= TWINS
