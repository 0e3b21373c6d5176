"""Shared fixtures. Frameworks are imported lazily, and threads are fixed so float results repeat."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")
# One TensorFlow kernel thread, as torch gets one below, set before TensorFlow starts (and passed on
# to the zoo commands tests run): a kernel's summation order follows its thread count, and a
# recipe's trainer.num_threads would otherwise fix it for the rest of a pytest worker, so a float
# result would depend on which test files the worker happened to run first.
os.environ.setdefault("TF_NUM_INTRAOP_THREADS", "1")
# And a run whose recipe leaves trainer.num_threads unset takes one thread in both frameworks, not
# the CPUs free at that moment (zoo.hardware.kernel_threads): a result must not follow the load.
os.environ.setdefault("ZOO_NUM_THREADS", "1")
# The memory check before a run (zoo.peak_memory) reads what the machine has free now, which
# other work on it decides: tests that are about the check set the figure themselves; for the
# rest its verdict must not depend on what else the machine is running.
os.environ.setdefault("ZOO_AVAILABLE_MEMORY", "unlimited")

import warm_zoo

from zoo import registry

# Shared helpers that assert: their failures get pytest's detailed explanation too.
pytest.register_assert_rewrite("cli_helpers", "fast_load_checks", "trained_runs")

# The tests that build every registry entry in both frameworks take the entries up to BUILD_LIMIT
# parameters in `make test`, at least one a family: ALL_NAMES (counts, weight tables, seeded
# starts) marks the rest heavy, which `make test-heavy` runs alone; BUILT_NAMES (checkpoint round
# trips and fast loads, which add a small-image twin pair and four loads an entry) marks them heavy
# too, up to ROUND_TRIP_LIMIT, and leaves out the larger ones;
# test_registry builds each entry once per framework and config for all of its tests. A family
# entry that is one of its presets (resnet is resnet18) is left out. Above the limit a Keras build alone is
# 3-45 s (resnet18, bert-minilm-l6, convnext-tiny, resnet101, smollm-360m, gpt2-medium on two busy
# cores: the forward pass that makes the variables, then their initialisers), while the code they
# run is the family's, which its smaller presets run too (every family has one under the limit). Each family's
# reference tests still check its published sizes: parameter counts against transformers',
# torchvision's and timm's, and full-size imports where the family has them. Building llama-3.2-1b
# (1.2 billion parameters) in both frameworks took one pytest process to 15.8 GB.
BUILD_LIMIT = 10_000_000


def _same_as_a_preset(entry) -> bool:
    """A family entry whose default config is one of its presets' (resnet is resnet18): building
    it again checks nothing its preset does not."""

    def fields(name: str) -> str:
        return registry.resolve_config(name).model_dump_json(exclude={"preset", "architecture"})

    family = registry.get_family(entry.name)
    return entry.kind == "family" and any(
        fields(preset.name) == fields(entry.name) for preset in family.presets
    )


# Presets that no test machine could build (Mixtral-8x7B, 187 GB in float32) are listed and
# counted against transformers' on the meta device, never built, heavy or not.
NEVER_BUILT = 5_000_000_000
ENTRIES = [
    e for e in registry.list_architectures() if not _same_as_a_preset(e) and e.parameters <= NEVER_BUILT
]
ALL_NAMES = [
    pytest.param(e.name, marks=pytest.mark.heavy) if e.parameters > BUILD_LIMIT else e.name for e in ENTRIES
]
# Round trips and fast loads stop at ROUND_TRIP_LIMIT: above it two more Keras builds an entry
# (20-45 s each) would test nothing its family's smaller presets do not; up to it, an entry over
# BUILD_LIMIT is heavy here too.
ROUND_TRIP_LIMIT = 25_000_000
BUILT_NAMES = [
    pytest.param(e.name, marks=pytest.mark.heavy) if e.parameters > BUILD_LIMIT else e.name
    for e in ENTRIES
    if e.parameters <= ROUND_TRIP_LIMIT
]
RECIPE = Path(__file__).parent.parent / "recipes" / "cnn-digits.yaml"
FRAMEWORKS = ["lightning", "keras"]


def tiny(tmp_path, *overrides):
    """Overrides that turn the default recipe into a seconds-long run writing under tmp_path."""
    return [
        "model.architecture=convnet-tiny", "trainer.max_epochs=2", "trainer.progress_bar=false",
        "data.batch_size=64", "optimizer.lr=0.01", f"export.dir={tmp_path}", *overrides,
    ]  # fmt: skip


SHORT_TEXT = "the cat sat on the mat. a dog ran in the fog. " * 40


def tiny_lm_recipe(folder: Path, name: str, **sections) -> dict:
    """A seconds-long language-model recipe: a one-layer gpt2-micro on SHORT_TEXT (written into
    ``folder``), runs under folder/runs; ``sections`` replace or add whole sections (``init``...)
    or, as dicts, update a section's fields."""
    (folder / "text.txt").write_text(SHORT_TEXT)
    recipe = {
        "name": name,
        "model": {"architecture": "gpt2-micro", "n_layer": 1},
        "data": {"name": "text", "path": str(folder / "text.txt"), "seq_len": 16, "batch_size": 8},
        "optimizer": {"name": "adamw", "lr": 0.01},
        "trainer": {"max_epochs": 1, "progress_bar": False},
        "export": {"dir": str(folder / "runs")},
        "tracking": {"tensorboard": False},
    }
    for section, fields in sections.items():
        recipe[section] = {**recipe.get(section, {}), **fields}
    return recipe


def pytest_configure(config):
    import torch

    torch.set_num_threads(1)
    # The xdist controller (it runs no test) builds the reference environment while the
    # workers test: see reference_env.build_in_background.
    if getattr(config.option, "numprocesses", None) and not os.environ.get("PYTEST_XDIST_WORKER"):
        import reference_env

        reference_env.build_in_background()


@pytest.fixture(autouse=True, scope="module")
def _warm_servers_yield_to_memory():
    """The pre-imported servers of tests/warm_zoo.py outlive the file that started them, for the
    worker's next files, unless memory runs short (warm_zoo.release_if_short)."""
    yield
    warm_zoo.release_if_short()


@pytest.fixture
def tmp_checkpoints(tmp_path, monkeypatch):
    """Runs write under a temporary folder, never into the repository."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


SMALL_IMAGE = 32


def parity_config(name: str, **overrides):
    """The registry entry's config with dropout off, so train-mode outputs are comparable,
    and at 32x32 where its default image is larger (ImageNet's 224): the tests check the
    mapping and the arithmetic, which a smaller image exercises just as well."""
    config = registry.resolve_config(name)
    fields = {k: 0.0 for k in type(config).model_fields if "dropout" in k}
    return registry.resolve_config(name, **{**fields, **small_input(config), **overrides})


def small_input(config) -> dict:
    """``{"image_size": 32}`` for a config whose data-decided image size is larger and that
    is valid at 32; ``{}`` otherwise."""
    if "image_size" not in config.DATA_FIELDS or config.image_size <= SMALL_IMAGE:
        return {}
    try:
        type(config).model_validate({**config.model_dump(), "image_size": SMALL_IMAGE})
    except ValueError:
        return {}
    return {"image_size": SMALL_IMAGE}


def twins(name: str, tensors: dict[str, np.ndarray] | None = None, **fields):
    """(config, torch twin, Keras twin) of a preset or family with ``fields``, both holding
    ``tensors`` (default: the torch twin's init after ``torch.manual_seed(0)``)."""
    import torch

    from zoo.checkpoint.tensors import load_tensors, model_tensors

    config = registry.resolve_config(name, **fields)
    family = registry.get_family(name)
    torch.manual_seed(0)
    torch_model = family.build_torch(config)
    keras_model = family.build_keras(config)
    tensors = model_tensors(torch_model) if tensors is None else tensors
    load_tensors(torch_model, tensors)
    load_tensors(keras_model, tensors)
    return config, torch_model, keras_model


def forward_torch(model, x: np.ndarray, training: bool) -> np.ndarray:
    """A torch twin's output for a canonical-layout input, in train or eval mode."""
    import torch

    model.train(training)
    with torch.no_grad():
        return model(torch.from_numpy(x)).numpy()


def forward_keras(model, x: np.ndarray, family, training: bool) -> np.ndarray:
    """A Keras twin's output for the same canonical-layout input."""
    from zoo.keras.data import keras_layout

    return np.asarray(model(keras_layout(x, family.input_kind), training=training))


def eval_output(model, ids: np.ndarray, padding: np.ndarray | None = None) -> np.ndarray:
    """A token model's eval-mode output (logits or hidden states) for ``ids`` with ``padding``
    (True at padding), from either twin."""
    import torch

    if isinstance(model, torch.nn.Module):
        model.eval()
        with torch.no_grad():
            mask = None if padding is None else torch.from_numpy(padding)
            return model(torch.from_numpy(ids), padding_mask=mask).numpy()
    return np.asarray(model(ids, padding_mask=padding, training=False))


def char_checkpoint(folder: Path, name: str, vocab: str, preprocessing=None, **fields) -> Path:
    """A character model of the preset ``name`` with random weights (all of them non-trivial),
    saved with ``vocab`` (and ``preprocessing``, a zoo.preprocessing record) as FOLDER/NAME.safetensors."""
    import torch

    import zoo

    config = registry.resolve_config(name, vocab_size=len(vocab), **fields)
    torch.manual_seed(0)
    model = registry.get_family(config.architecture).build_torch(config)
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(0.5 * torch.randn(parameter.shape, generator=generator))
    return zoo.save_checkpoint(
        model, folder / f"{name}.safetensors", vocab=vocab, preprocessing=preprocessing
    )


def perturbed_twins(name: str, **fields):
    """(config, torch twin, Keras twin) of the preset ``name`` with ``fields``: the torch twin
    seeded and every parameter moved by N(0, 0.2^2) (nothing left at a trivial init), the Keras
    twin holding the same tensors."""
    import torch

    from zoo.checkpoint.tensors import load_tensors, model_tensors

    config = registry.resolve_config(name, **fields)
    family = registry.get_family(name)
    torch.manual_seed(0)
    torch_model = family.build_torch(config).eval()
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for parameter in torch_model.parameters():
            parameter.add_(0.2 * torch.randn(parameter.shape, generator=generator))
    keras_model = family.build_keras(config)
    load_tensors(keras_model, model_tensors(torch_model))
    return config, torch_model, keras_model


def cached_logits(model, ids: np.ndarray, padding: np.ndarray, prompt: int):
    """A decoder twin's logits at positions ``prompt - 1`` .. T - 1 through its key/value cache:
    the first ``prompt`` tokens (with their ``padding``) in one ``decode`` call, then one token a
    call. Returns them stacked (N, T - prompt + 1, vocab) and the final cache."""
    import torch

    as_input = torch.from_numpy if isinstance(model, torch.nn.Module) else np.asarray
    with torch.no_grad():
        logits, cache = model.decode(as_input(ids[:, :prompt]), None, as_input(padding[:, :prompt]))
        steps = [np.asarray(logits)]
        for t in range(prompt, ids.shape[1]):
            logits, cache = model.decode(as_input(ids[:, t : t + 1]), cache)
            steps.append(np.asarray(logits))
    return np.stack(steps, axis=1), cache


def relative_error(got, expected) -> float:
    """max |got - expected| / max |expected|: the norm of the reference-implementation tests."""
    return max_diff(got, expected) / float(np.max(np.abs(np.asarray(expected, np.float64))))


def max_diff(a, b) -> float:
    """max |a - b|, the difference taken in float64 (exact for float32 inputs) with no float64
    copies of the inputs."""
    a, b = np.asarray(a), np.asarray(b)
    if a.dtype.kind not in "biuf" or b.dtype.kind not in "biuf":  # ml_dtypes' bfloat16: cast first
        a, b = a.astype(np.float64), b.astype(np.float64)
    difference = np.asarray(np.subtract(a, b, dtype=np.float64))  # 0-d inputs give a scalar
    return float(np.max(np.abs(difference, out=difference)))


@pytest.fixture(scope="session")
def even_npz(tmp_path_factory):
    """8x8 'images', 4 classes; 256 training samples = 4 full batches of 64, so batches split
    evenly across replicas and into micro-batches."""
    root = tmp_path_factory.mktemp("npz")
    rng = np.random.default_rng(0)
    x = rng.normal(size=(320, 8, 8)).astype(np.float32)
    y = (x[:, :4].mean(axis=(1, 2)) > 0).astype(np.int64) + 2 * (x[:, 4:].mean(axis=(1, 2)) > 0)
    path = root / "data.npz"
    np.savez(path, x_train=x[:256], y_train=y[:256], x_val=x[256:], y_val=y[256:],
             x_test=x[256:], y_test=y[256:])  # fmt: skip
    return path


@pytest.fixture(scope="session")
def trained_runs(tmp_path_factory):
    """The session's shared trained runs (tests/trained_runs.py): ``trained_runs.train(recipe,
    framework, overrides)`` trains a recipe once for the whole test run, both workers included,
    and returns its zoo.api.TrainResult, whose folder tests only read; a test that writes a run
    takes ``copy_run(result, tmp_path)``. At the end, fails if any test changed a shared run."""
    from trained_runs import TrainedRuns, session_folder

    runs = TrainedRuns(session_folder(tmp_path_factory))
    yield runs
    runs.check_all()
