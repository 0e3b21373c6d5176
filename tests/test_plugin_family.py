"""A family from outside the repository, registered as a third-party package would be.

The plugin (``zoo_mlp``: a small MLP over images) lives in a temporary folder with a
``*.dist-info`` next to it whose ``entry_points.txt`` declares ``zoo.architectures``; that
is all ``importlib.metadata`` needs to find it on ``sys.path``. Nothing in zoo names it.
The full run (train in both frameworks, cross-load, compare, fine-tune) happens in a
fresh interpreter with the plugin on ``PYTHONPATH``, as for an installed package: the
recipe schema's model union is fixed when ``zoo.recipe`` is imported. The contract
checks run in this process, with the registry's caches cleared around them. A plugin that
cannot be imported leaves every other command working.
"""

from __future__ import annotations

import importlib
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import RECIPE

from zoo import registry

PLUGIN = {
    "__init__.py": '''
        """A plugin family: a multi-layer perceptron over flattened images."""

        from zoo.family import Family, InputSpec, Preset
        from zoo_mlp.config import MLPConfig
        from zoo_mlp.weights import table

        FAMILY = Family(
            name="mlp",
            description="Multi-layer perceptron over the flattened image (a plugin family).",
            config=MLPConfig,
            inputs=InputSpec("image"),
            tasks=("classification",),
            weight_table=table,
            torch_model="zoo_mlp.torch_model:build",
            keras_model="zoo_mlp.keras_model:build",
            grad_checkpointing=("lightning", "keras"),
            presets=(Preset("mlp-tiny", "One 32-wide hidden layer: for tests.", {"hidden": [32]}),),
        )
        ''',
    "config.py": """
        from typing import Literal

        from pydantic import Field, PositiveInt

        from zoo.family import ArchitectureConfig


        class MLPConfig(ArchitectureConfig):
            DATA_FIELDS = ("in_channels", "image_size", "num_classes")

            architecture: Literal["mlp"] = "mlp"
            in_channels: PositiveInt = Field(1, description="Image channels (from the data).")
            image_size: PositiveInt = Field(8, description="Image height and width (from the data).")
            num_classes: int = Field(10, ge=2, description="Classes (from the data).")
            hidden: list[PositiveInt] = Field([64], min_length=1, max_length=4, description="Hidden widths.")
            dropout: float = Field(0.0, ge=0, lt=1, description="Dropout before the head.")

            @property
            def chw(self) -> tuple[int, int, int]:
                return (self.in_channels, self.image_size, self.image_size)

            def sample_shape(self) -> tuple[int, ...]:
                return self.chw
        """,
    "weights.py": """
        from zoo.checkpoint.tables import dense


        def table(cfg):
            c, h, w = cfg.chw
            widths = [c * h * w, *cfg.hidden]
            ports = [
                dense(f"blocks.{i}.fc", a, b, flatten_chw=cfg.chw if i == 0 else None)
                for i, (a, b) in enumerate(zip(widths, widths[1:]))
            ]
            return [*ports, dense("head", widths[-1], cfg.num_classes)]
        """,
    "torch_model.py": """
        import torch
        from torch import nn

        from zoo.nn.torch.remat import checkpointed_call


        class Block(nn.Module):
            def __init__(self, cin, cout):
                super().__init__()
                self.fc = nn.Linear(cin, cout)

            def forward(self, x):
                return torch.relu(self.fc(x))


        class MLP(nn.Module):
            grad_checkpointing = False

            def __init__(self, cfg):
                super().__init__()
                self.zoo_config = cfg
                c, h, w = cfg.chw
                widths = [c * h * w, *cfg.hidden]
                self.blocks = nn.ModuleList(Block(a, b) for a, b in zip(widths, widths[1:]))
                self.dropout = nn.Dropout(cfg.dropout)
                self.head = nn.Linear(widths[-1], cfg.num_classes)

            def set_grad_checkpointing(self, enable=True):
                self.grad_checkpointing = enable

            def forward_features(self, x):
                x = x.flatten(1)
                for block in self.blocks:
                    remat = self.grad_checkpointing and self.training and torch.is_grad_enabled()
                    x = checkpointed_call(block, x) if remat else block(x)
                return x

            def forward_head(self, x):
                return self.head(self.dropout(x))

            def forward(self, x):
                return self.forward_head(self.forward_features(x))


        def build(cfg):
            return MLP(cfg)
        """,
    "keras_model.py": """
        import keras
        from keras import layers, ops

        from zoo.nn.keras.remat import checkpointed_call
        from zoo.nn.keras import Dense


        class Block(layers.Layer):
            def __init__(self, units, **kw):
                super().__init__(**kw)
                self.fc = Dense(units)

            def call(self, x, training=False):
                return ops.relu(self.fc(x))


        class MLP(keras.Model):
            grad_checkpointing = False

            def __init__(self, cfg, **kw):
                super().__init__(**kw)
                self.zoo_config = cfg
                self.blocks = [Block(width) for width in cfg.hidden]
                self.dropout = layers.Dropout(cfg.dropout)
                self.head = Dense(cfg.num_classes)

            def set_grad_checkpointing(self, enable=True):
                self.grad_checkpointing = enable

            def forward_features(self, x, training=False):
                x = ops.reshape(x, (ops.shape(x)[0], -1))  # (N, H, W, C): the table permutes
                for block in self.blocks:
                    remat = training and self.grad_checkpointing
                    x = checkpointed_call(block, x) if remat else block(x, training=training)
                return x

            def call(self, x, training=False):
                return self.head(self.dropout(self.forward_features(x, training), training=training))


        def build(cfg):
            model = MLP(cfg)
            model(ops.zeros((1, cfg.image_size, cfg.image_size, cfg.in_channels)))
            return model
        """,
}

# Run in a fresh interpreter with the plugin installed; prints one line per proven step.
SCENARIO = """
import sys
from pathlib import Path

import numpy as np

import zoo
from zoo import registry
from zoo.keras.data import keras_layout

recipe, out = sys.argv[1], Path(sys.argv[2])
family = registry.get_family("mlp-tiny")
assert family.name == "mlp" and "mlp-tiny" in registry.presets()
base = ["model.architecture=mlp-tiny", "trainer.max_epochs=2", "trainer.progress_bar=false",
        "data.batch_size=64", "optimizer.lr=0.01", f"export.dir={out}"]

trained = {fw: zoo.train(recipe, framework=fw, overrides=[*base, f"name=mlp-{fw}"])
           for fw in ("lightning", "keras")}
for fw, result in trained.items():
    accuracy = [v for k, v in result.metrics.items() if "acc" in k]
    assert accuracy and max(accuracy) > 0.5, (fw, result.metrics)
    print("trained", fw, result.metrics, flush=True)

for fw, result in trained.items():
    torch_model = zoo.load_checkpoint(result.checkpoint, framework="lightning")
    keras_model = zoo.load_checkpoint(result.checkpoint, framework="keras")
    x = torch_model.zoo_config.example_input(16, seed=3)
    import torch
    torch_model.eval()
    with torch.no_grad():
        a = torch_model(torch.from_numpy(x)).numpy()
    b = np.asarray(keras_model(keras_layout(x, family.input_kind), training=False))
    gap = float(np.max(np.abs(a - b)))
    assert gap <= 1e-5, (fw, gap)
    print("cross-loaded", fw, gap, flush=True)

result = zoo.compare(recipe, steps=3, overrides=base, speed_steps=0, write=False)
assert result.sections, result.text
print("compared", result.verdicts, flush=True)

source = trained["keras"].checkpoint
tuned = zoo.train(recipe, framework="lightning", overrides=[
    *base, "name=mlp-finetune", "trainer.max_epochs=1", f"init.from={source}", "init.freeze_backbone=true"])
before, after = zoo.load_checkpoint(source), zoo.load_checkpoint(tuned.checkpoint)
before, after = before.state_dict(), after.state_dict()
assert all(torch.equal(before[k], after[k]) for k in before if not k.startswith("head.")), "backbone moved"
assert not torch.equal(before["head.weight"], after["head.weight"]), "head did not train"
tuned = zoo.train(recipe, framework="keras", overrides=[
    *base, "name=mlp-finetune-keras", "trainer.max_epochs=1", f"init.from={trained['lightning'].checkpoint}"])
print("fine-tuned", tuned.metrics, flush=True)
"""


def write_plugin(root: Path, package: str, files: dict[str, str], distribution: str, entry: str) -> Path:
    """A package and the dist-info an installer would write for it: enough for entry points."""
    for name, text in files.items():
        path = root / package / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip())
    info = root / f"{distribution.replace('-', '_')}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {distribution}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[{registry.GROUP}]\n{entry}\n")
    return root


@pytest.fixture
def installed(tmp_path):
    """Put plugin folders on ``sys.path`` for this process; leave the registry as it was."""
    added: list[str] = []

    def install(*args) -> Path:
        root = write_plugin(*args)
        sys.path.insert(0, str(root))
        added.append(str(root))
        importlib.invalidate_caches()
        registry.families.cache_clear()
        registry.presets.cache_clear()
        return root

    yield install
    for root in added:
        sys.path.remove(root)
    for module in [m for m in sys.modules if m.split(".")[0] in ("zoo_mlp", "zoo_broken")]:
        del sys.modules[module]
    importlib.invalidate_caches()
    registry.families.cache_clear()
    registry.presets.cache_clear()


def test_a_plugin_family_registers_through_its_entry_point(installed, tmp_path):
    installed(tmp_path, "zoo_mlp", PLUGIN, "zoo-mlp", "mlp = zoo_mlp:FAMILY")
    assert {"cnn", "mlp"} <= set(registry.families())
    entries = {e.name: e for e in registry.list_architectures()}
    assert (
        entries["mlp-tiny"].family == "mlp" and entries["mlp-tiny"].parameters == 64 * 32 + 32 + 32 * 10 + 10
    )
    config = registry.resolve_config("mlp-tiny")
    assert config.active_task == "classification" and config.example_input(2).shape == (2, 1, 8, 8)


def test_the_plugin_trains_exports_compares_and_fine_tunes_in_both_frameworks(tmp_path):
    root = write_plugin(tmp_path / "site", "zoo_mlp", PLUGIN, "zoo-mlp", "mlp = zoo_mlp:FAMILY")
    script = tmp_path / "scenario.py"
    script.write_text(textwrap.dedent(SCENARIO))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")])}
    env.setdefault("KERAS_BACKEND", "tensorflow")
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    run = subprocess.run(
        [sys.executable, str(script), str(RECIPE), str(tmp_path / "runs")],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    print(run.stdout)  # what each step proved, under pytest -s
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-8000:]
    steps = [line.split()[0] for line in run.stdout.splitlines()]
    assert steps == ["trained", "trained", "cross-loaded", "cross-loaded", "compared", "fine-tuned"], (
        run.stdout
    )


GOOD_CONFIG = PLUGIN["config.py"]
BROKEN = {
    "no weight table": (
        {"weight_table": "None"},
        r"weight_table: None is not callable",
    ),
    "config not an ArchitectureConfig": (
        {"config": "dict"},
        r"config: <class 'dict'> is not a subclass of zoo.family.ArchitectureConfig",
    ),
    "input kind as a bare string": (
        {"inputs": '"image"'},
        r"inputs: 'image' is not a zoo.family.InputSpec",
    ),
    "unknown task": (
        {"tasks": '("classification", "segmentation")'},
        r"tasks: \('classification', 'segmentation'\) is not a non-empty tuple",
    ),
    "weight table of the wrong type": (
        {"weight_table": "lambda cfg: {}"},
        r"weight_table: at the default config returns dict, not a list of zoo.checkpoint.tables.Port",
    ),
    "undeclared framework for checkpointing": (
        {"grad_checkpointing": '("jax",)'},
        r"grad_checkpointing: \('jax',\) is not a tuple of \('lightning', 'keras'\)",
    ),
    "invalid preset": (
        {"presets": '(Preset("broken-wide", "bad", {"hidden": []}),)'},
        r"presets: 'broken-wide' is not a valid MLPConfig",
    ),
    "format-target": (
        {"formats": '(ForeignFormat("theirs", "their layout", "zoo_broken.formats", "x:y"),)'},
        r"formats: 'theirs'\.to_zoo 'zoo_broken\.formats' is not a 'module:callable' string",
    ),
    "format-type": (
        {"formats": '("torchvision",)'},
        r"formats: .* is not a tuple of zoo\.checkpoint\.foreign\.ForeignFormat",
    ),
    "adapt-target": ({"adapt_tensors": '"resample"'}, r"adapt_tensors: 'resample' is not None or a"),
}


def _broken_init(**replace: str) -> str:
    pieces = {
        "config": "MLPConfig",
        "inputs": 'InputSpec("image")',
        "tasks": '("classification",)',
        "weight_table": "table",
        "grad_checkpointing": "()",
        "presets": "()",
        **replace,
    }
    arguments = "".join(f"    {key}={value},\n" for key, value in pieces.items())
    return (
        "from zoo.family import Family, InputSpec, Preset\n"
        "from zoo.checkpoint.foreign import ForeignFormat\n"
        "from zoo_broken.config import MLPConfig\n"
        "from zoo_broken.weights import table\n\n"
        'FAMILY = Family(\n    name="broken",\n    description="A plugin that misses a piece.",\n'
        f'{arguments}    torch_model="zoo_broken.torch_model:build",\n'
        '    keras_model="zoo_broken.keras_model:build",\n)\n'
    )


def unavailable_family(name: str, caplog) -> str:
    """Why the registry skipped ``name``: the other families still load, its one-line warning
    names the package and how to remove it, and naming the family says why it is unavailable."""
    assert name not in registry.families() and "cnn" in registry.families()
    (warning,) = [
        r.getMessage() for r in caplog.records if "skipping the architecture family" in r.getMessage()
    ]
    assert "\n" not in warning and "pip uninstall zoo-broken" in warning, warning
    with pytest.raises(
        registry.UnknownArchitectureError, match=f"the architecture family '{name}' is unavailable"
    ):
        registry.get_family(name)
    return registry.unavailable()[name]


@pytest.mark.parametrize("case", list(BROKEN))
def test_a_family_missing_a_piece_is_skipped_at_registry_load(case, installed, tmp_path, caplog):
    replace, message = BROKEN[case]
    config = GOOD_CONFIG.replace('"mlp"', '"broken"')
    files = {**PLUGIN, "config.py": config, "__init__.py": _broken_init(**replace)}
    installed(tmp_path, "zoo_broken", files, "zoo-broken", "broken = zoo_broken:FAMILY")
    text = unavailable_family("broken", caplog)
    assert "zoo.architectures:broken = 'zoo_broken:FAMILY' of the package 'zoo-broken'" in text
    assert "does not fill the family contract" in text
    assert re.search(message, text), text


def test_an_entry_point_that_is_not_a_family_names_the_plugin(installed, tmp_path, caplog):
    files = {"__init__.py": "FAMILY = {'name': 'loose'}\n"}
    installed(tmp_path, "zoo_broken", files, "zoo-broken", "loose = zoo_broken:FAMILY")
    assert re.search(r"zoo.architectures:loose .* is a dict, not a zoo", unavailable_family("loose", caplog))


def test_an_entry_point_that_cannot_be_imported_names_the_plugin(installed, tmp_path, caplog):
    files = {"__init__.py": "import zoo_no_such_module\n"}
    installed(tmp_path, "zoo_broken", files, "zoo-broken", "gone = zoo_broken:FAMILY")
    assert re.search(r"zoo.architectures:gone .* cannot be imported", unavailable_family("gone", caplog))


def test_the_registry_is_restored_after_a_plugin_test():
    assert "mlp" not in registry.families() and "broken" not in registry.families()


def test_a_plugin_that_cannot_be_imported_leaves_every_command_working(tmp_path):
    root = write_plugin(tmp_path, "zoo_broken", {"__init__.py": "import zoo_no_such_module\n"}, "zoo-broken",
                        "gone = zoo_broken:FAMILY")  # fmt: skip
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")])}

    def command(*args):
        zoo_cli = [sys.executable, "-m", "zoo.cli", *args]
        return subprocess.run(zoo_cli, env=env, capture_output=True, text=True, timeout=300)

    listed = command("list")
    assert listed.returncode == 0 and "cnn" in listed.stdout, listed.stderr
    (warning,) = listed.stderr.splitlines()
    assert "skipping the architecture family 'gone'" in warning and "cannot be imported" in warning
    assert "No module named 'zoo_no_such_module'" in warning and "pip uninstall zoo-broken" in warning
    shown = command("show", "gone")
    assert shown.returncode == 2 and "the architecture family 'gone' is unavailable" in shown.stderr
    assert "Traceback" not in shown.stderr and "pip uninstall zoo-broken" in shown.stderr
    assert command("show", "convnet-tiny").returncode == 0
