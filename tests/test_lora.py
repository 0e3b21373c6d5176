"""LoRA (init.lora): PEFT is the oracle, both twins train the same adapter on a frozen base.

The PEFT side runs in the reference environment (``tests/reference/peft_lora.py``): it loads
the transformers model zoo exported and the PEFT adapter zoo exported, and makes an adapter of
its own (non-zero B) that zoo imports.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import reference_env
import warm_zoo
from click.testing import CliRunner
from conftest import max_diff

from zoo import registry
from zoo.checkpoint.file import CheckpointError
from zoo.checkpoint.metadata import read_checkpoint, write_checkpoint
from zoo.checkpoint.state import states
from zoo.cli import main
from zoo.initial_weights import initial_tensors as seeded
from zoo.interchange.exporting import export_checkpoint
from zoo.lora import (
    Adapter,
    base_digest,
    initial_tensors,
    load_adapter,
    read_adapter,
    write_adapter,
)
from zoo.recipe import load_recipe
from zoo.recipe.fine_tuning import LoraConfig

FRAMEWORKS = ("lightning", "keras")
PEFT = 2e-5  # float32 logits of zoo's twins against PEFT on transformers, both O(1)
MODELS = {  # family, preset, fields, zoo's targets for the export
    "gpt2": ("gpt2-micro", {"n_layer": 2, "vocab_size": 101}, ["q", "v", "out_proj", "mlp.fc1"]),
    "llama": ("llama-micro", {"num_hidden_layers": 2, "vocab_size": 101}, ["q_proj", "v_proj", "down_proj"]),
    "qwen3": (  # the llama family with Qwen3's query/key norms and a head width of its own
        "llama-micro",
        {"vocab_size": 101, "model_type": "qwen3", "qk_norm": True, "head_dim": 24},
        ["q_proj", "k_proj", "o_proj", "up_proj"],
    ),
    "phi3": (  # the llama family as Phi-3 writes it: q/k/v in one qkv_proj, gate and up in gate_up_proj
        "llama-micro",
        {"num_hidden_layers": 2, "vocab_size": 101, "model_type": "phi3", "pad_token_id": 0},
        ["q_proj", "v_proj", "gate_proj", "down_proj"],
    ),
    "mixtral": (  # a mixture of experts: the attention adapted, the experts frozen with the base
        "mixtral-micro",
        {"vocab_size": 101},
        ["q_proj", "v_proj", "o_proj"],
    ),
    "gemma": ("gemma-micro", {"vocab_size": 101}, ["q_proj", "k_proj", "down_proj"]),
    "bert": (
        "bert-micro",
        {"num_layers": 2, "vocab_size": 101, "task": "masked_language_modeling"},
        ["attn.k", "attn.out_proj"],
    ),
}


def logits(model, ids: np.ndarray) -> np.ndarray:
    if hasattr(model, "state_dict"):
        import torch

        with torch.no_grad():
            return model.eval()(torch.from_numpy(ids)).numpy()
    return np.asarray(model(ids))


def base(tmp_path: Path, family_name: str) -> tuple[Path, dict]:
    preset, fields, _ = MODELS[family_name]
    family = registry.get_family(preset)
    config = family.config.model_validate(registry.expand(preset, fields))
    tensors = seeded(family, config, 0)
    rng = np.random.default_rng(3)  # biases and norms away from their trivial init: a mapping error shows
    tensors = {
        k: v + rng.normal(0, 0.1, v.shape).astype(np.float32) if v.ndim == 1 else v
        for k, v in tensors.items()
    }
    return write_checkpoint(tmp_path / "base.safetensors", config, tensors, framework="lightning"), tensors


def random_adapter(tmp_path: Path, family_name: str) -> Path:
    """An adapter on ``base`` whose B is not zero (else every check passes trivially)."""
    path, tensors = base(tmp_path, family_name)
    checkpoint = read_checkpoint(path)
    adapter = Adapter.from_recipe(
        checkpoint.family, checkpoint.config, LoraConfig(rank=4, alpha=8, target=MODELS[family_name][2])
    )
    rng = np.random.default_rng(0)
    lora = {
        k: rng.normal(0, 0.1, v.shape).astype(np.float32) if k.endswith("lora_B") else v
        for k, v in initial_tensors(adapter, 0).items()
    }
    return write_adapter(
        tmp_path / "adapter.safetensors", checkpoint.family, checkpoint.config, adapter, lora,
        {"path": str(path), "sha256": base_digest(tensors)}, framework="lightning",
    )  # fmt: skip


@pytest.mark.parametrize("family_name", list(MODELS))
def test_peft_loads_zoos_adapter_and_zoo_imports_peft_s(family_name, tmp_path):
    """zoo export --format peft -> PeftModel.from_pretrained on transformers' model: zoo's logits
    (merged too); PEFT's own adapter (non-zero B) -> zoo import --base: PEFT's logits in both twins."""
    adapter = random_adapter(tmp_path, family_name)
    export_checkpoint(tmp_path / "base.safetensors", "hf", tmp_path / "hf")
    exported = CliRunner().invoke(
        main, ["export", str(adapter), "--format", "peft", "--out", str(tmp_path / "peft")]
    )
    assert exported.exit_code == 0, exported.output
    assert {p.name for p in (tmp_path / "peft").iterdir()} == {
        "adapter_model.safetensors",
        "adapter_config.json",
    }
    config = read_adapter(adapter).config
    ids = config.example_input(3, seed=1)
    np.save(tmp_path / "ids.npy", ids)
    ref = reference_env.run(
        "peft_lora.py",
        tmp_path / "ref",
        str(tmp_path / "hf"),
        str(tmp_path / "ids.npy"),
        str(tmp_path / "peft"),
    )
    ours = {framework: logits(load_adapter(adapter, framework), ids) for framework in FRAMEWORKS}
    for framework, value in ours.items():
        assert np.abs(value - np.load(ref / "exported-logits.npy")).max() <= PEFT, framework
        assert np.abs(value - np.load(ref / "exported-merged-logits.npy")).max() <= PEFT, framework
    assert np.abs(ours["lightning"] - logits(load_adapter(adapter, "lightning", None), ids)).max() == 0

    imported = CliRunner().invoke(
        main,
        [
            "import",
            str(ref / "made"),
            "--base",
            str(tmp_path / "base.safetensors"),
            "--out",
            str(tmp_path / "imp"),
        ],
    )
    assert imported.exit_code == 0, imported.output
    made = np.load(ref / "made-logits.npy")
    base_logits = logits(load_adapter(tmp_path / "imp" / "adapter.safetensors", "lightning"), ids)
    assert np.abs(base_logits - made).max() <= PEFT
    assert (
        np.abs(logits(load_adapter(tmp_path / "imp" / "adapter.safetensors", "keras"), ids) - made).max()
        <= PEFT
    )
    if family_name not in ("gpt2", "phi3"):  # one module per zoo projection (not fused): PEFT's count
        imported_tensors = read_adapter(tmp_path / "imp" / "adapter.safetensors").tensors
        count = sum(v.size for k, v in imported_tensors.items() if k.endswith(("lora_A", "lora_B")))
        assert count == json.loads((ref / "made.json").read_text())["trainable"]


def test_merged_equals_unmerged_and_another_base_is_refused(tmp_path):
    adapter = random_adapter(tmp_path, "llama")
    merged = CliRunner().invoke(main, ["merge", str(adapter), "--out", str(tmp_path / "merged")])
    assert merged.exit_code == 0, merged.output
    from zoo.backend import load_checkpoint

    ids = read_adapter(adapter).config.example_input(2, seed=2)
    for framework in FRAMEWORKS:
        whole = logits(load_checkpoint(tmp_path / "merged" / "model.safetensors", framework), ids)
        assert np.abs(whole - logits(load_adapter(adapter, framework), ids)).max() <= 1e-5, framework
    other = tmp_path / "other"
    other.mkdir()
    base(other, "llama")  # the same config, other biases: another base
    tensors = read_checkpoint(other / "base.safetensors").tensors()
    tensors["norm.weight"] = tensors["norm.weight"] + 1
    write_checkpoint(
        other / "base.safetensors",
        read_checkpoint(other / "base.safetensors").config,
        tensors,
        framework="lightning",
    )
    with pytest.raises(
        CheckpointError,
        match=r"was trained on a base with sha256 [0-9a-f]{64}, but .* has sha256 [0-9a-f]{64}",
    ):
        load_adapter(adapter, "lightning", base=other / "base.safetensors")
    refused = CliRunner().invoke(
        main,
        ["merge", str(adapter), "--base", str(other / "base.safetensors"), "--out", str(tmp_path / "m2")],
    )
    assert refused.exit_code == 2 and "sha256" in refused.output


def test_an_unknown_target_lists_the_valid_names():
    raw = {
        "model": {"architecture": "llama-micro"},
        "data": {"name": "text"},
        "init": {"lora": {"target": ["qkv"]}},
    }
    with pytest.raises(
        ValueError,
        match=r"'qkv' matches no projection .* self_attn.q_proj, self_attn.k_proj, .*, mlp.gate_proj",
    ):
        load_recipe(raw)
    assert load_recipe({**raw, "init": {"lora": {}}}).init.lora.target is None  # the family's default


def tiny_recipe(tmp_path: Path, base_path: Path | None, **trainer) -> dict:
    text = tmp_path / "text.txt"
    text.write_text("the cat sat on the mat. a dog ran in the fog. " * 40)
    return {
        "name": "lora",
        "model": {"architecture": "gpt2-micro", "n_layer": 2},
        "data": {"name": "text", "path": str(text), "seq_len": 16, "batch_size": 8},
        "optimizer": {"name": "adamw", "lr": 0.01},
        "trainer": {"max_epochs": 1, "progress_bar": False, **trainer},
        "init": {
            "lora": {"rank": 4, "train_bias": "lora_only"},
            **({"from": str(base_path)} if base_path else {}),
        },
        "export": {"dir": str(tmp_path / "runs")},
        "tracking": {"tensorboard": False},
    }


@pytest.mark.parametrize("framework", FRAMEWORKS)
@pytest.mark.parametrize("knobs", [{}, {"precision": "bf16-mixed", "gradient_checkpointing": True}])
def test_a_lora_run_trains_the_adapter_alone_on_a_frozen_base(framework, knobs, tmp_path):
    """The run writes adapter.safetensors naming its base by path and sha256; the base's tensors
    after training are bit-identical to the checkpoint's (the digest), only A, B and the adapted
    projections' biases moved."""
    from zoo import train

    first = train(tiny_recipe(tmp_path, None, max_epochs=1), framework)  # a base to start from
    seed_adapter = read_adapter(first.checkpoint)
    assert first.checkpoint.name == "adapter.safetensors" and seed_adapter.base["seed"] == 0
    base_path = tmp_path / "base.safetensors"
    from zoo.lora import merge_adapter

    merge_adapter(first.checkpoint, base_path)
    result = train(tiny_recipe(tmp_path, base_path, **knobs), framework)
    adapter = read_adapter(result.checkpoint)
    base_tensors = read_checkpoint(base_path).tensors()
    trained = set(adapter.adapter.bias_names(adapter.family, adapter.config))
    assert adapter.base == {
        "path": str(base_path.resolve()),
        "sha256": base_digest({k: v for k, v in base_tensors.items() if k not in trained}),
    }
    assert trained == {f"h.{i}.attn.{b}" for i in range(2) for b in ("in_proj_bias", "out_proj.bias")}
    assert set(adapter.tensors) == set(adapter.adapter.tensor_names()) | trained
    assert all(np.abs(adapter.tensors[f"{p.name}.lora_B"]).max() > 0 for p in adapter.adapter.points)
    model = load_adapter(result.checkpoint, framework)  # checks the digest again
    assert model is not None
    assert os.path.getsize(result.checkpoint) < os.path.getsize(base_path) / 4


def test_the_trainable_parameters_are_the_adapters():
    from zoo.lora import attach

    recipe = load_recipe(tiny_recipe(Path("/tmp"), None) | {"data": {"name": "text", "seq_len": 16}})
    family = registry.get_family("gpt2")
    config = recipe.model
    from zoo.initial_weights import seeded_keras_model, seeded_torch_model

    torch_model, keras_model = seeded_torch_model(family, config, 0), seeded_keras_model(family, config, 0)
    lora = recipe.init.lora.model_copy(update={"train_bias": "none"})
    for model in (torch_model, keras_model):
        attach(model, family, config, lora, 0)
    d, r = config.n_embd, 4
    expected = 2 * (3 * r * (d + d) + r * (d + d))  # two blocks: q, k, v, out_proj, each r x (in + out)
    assert sum(p.numel() for p in torch_model.parameters() if p.requires_grad) == expected
    assert sum(int(np.prod(v.shape)) for v in keras_model.trainable_variables) == expected


def command(tmp_path: Path, framework: str, recipe: Path, name: str) -> list[str]:
    sets = ["trainer.max_epochs=2", "trainer.deterministic=true", "trainer.num_threads=1",
            "export.state_every_n_steps=3", f"export.run_name={name}"]  # fmt: skip
    return [sys.executable, "-m", "zoo.cli", "train", str(recipe), "--framework", framework,
            *(a for s in sets for a in ("--set", s))]  # fmt: skip


def quantized_base(tmp_path: Path) -> Path:
    """An int4 checkpoint of a gpt2-micro that tiny_recipe's text fits, with its tokenizer: a
    one-epoch LoRA run on the seeded base, merged, then ``zoo quantize``d."""
    from zoo import quantize_checkpoint, train
    from zoo.lora import merge_adapter

    (tmp_path / "first").mkdir()
    first = train(tiny_recipe(tmp_path / "first", None), "lightning")
    merged = tmp_path / "merged"
    merged.mkdir()
    for name in ("tokenizer.json", "tokenizer_config.json"):
        if (first.run_dir / name).is_file():
            (merged / name).write_bytes((first.run_dir / name).read_bytes())
    merge_adapter(first.checkpoint, merged / "model.safetensors")
    return quantize_checkpoint(merged / "model.safetensors", tmp_path / "int4", "int4").path


@pytest.mark.slow
@pytest.mark.parametrize(
    ("framework", "base"), [("lightning", "seeded"), ("lightning", "int4"), ("keras", "int4")]
)
def test_sigkill_then_resume_gives_the_same_adapter(framework, base, tmp_path):
    """As test_resume.py for full training: killed mid-epoch 2, resumed, bit-identical to a run
    that was never stopped. The base is the seed's, or a quantized checkpoint (QLoRA, read again
    by path and sha256 on resume, and held as its integers: zoo.lora.hold_quantized_base) in both
    frameworks."""
    import yaml

    recipe = tmp_path / "recipe.yaml"
    raw = tiny_recipe(tmp_path, quantized_base(tmp_path) if base == "int4" else None)
    raw["init"]["lora"]["dropout"] = 0.1  # seeded dropout masks must resume too
    recipe.write_text(yaml.safe_dump(raw))
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    whole = warm_zoo.run(
        command(tmp_path, framework, recipe, "whole"), env=env, capture_output=True, text=True, timeout=300
    )
    assert whole.returncode == 0, whole.stderr[-2000:]
    batches = json.loads((tmp_path / "runs" / "whole" / "summary.json").read_text())
    assert batches
    victim = warm_zoo.Popen(command(tmp_path, framework, recipe, "killed"), env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    run_dir = tmp_path / "runs" / "killed"
    deadline = time.monotonic() + 240
    steps = len(read_rows(tmp_path / "runs" / "whole"))
    target = steps // 2 + 1  # mid-epoch 2
    while not any(int(p.name.split("-")[1].split(".")[0]) >= target for p in states(run_dir)):
        assert victim.poll() is None, "the run ended before it could be killed"
        assert time.monotonic() < deadline
        time.sleep(0.02)
    victim.send_signal(signal.SIGKILL)
    victim.wait()
    assert not (run_dir / "adapter.safetensors").exists()
    resumed = warm_zoo.run(
        [sys.executable, "-m", "zoo.cli", "resume", str(run_dir)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    a, b = (
        read_adapter(tmp_path / "runs" / "whole" / "adapter.safetensors"),
        read_adapter(run_dir / "adapter.safetensors"),
    )
    assert a.tensors.keys() == b.tensors.keys()
    assert all(np.array_equal(a.tensors[k], b.tensors[k]) for k in a.tensors), "resumed adapter differs"


def read_rows(run_dir: Path) -> list[str]:
    """The optimizer steps of one epoch: the step column of metrics.csv's first row."""
    rows = (run_dir / "metrics.csv").read_text().splitlines()
    header = rows[0].split(",")
    return list(range(int(rows[1].split(",")[header.index("step")])))


RECIPE = Path(__file__).parent.parent / "recipes" / "gpt2-micro-lora-pydocs.yaml"


def test_compare_passes_on_the_shipped_lora_recipe(tmp_path):
    """Both twins from the same base and adapter init, the same batches: outputs, the gradients
    of the trainable tensors (the adapters alone) and training agree."""
    from compare_cases import SECTIONS

    from zoo.compare import compare

    text = tmp_path / "text.txt"
    text.write_text("the cat sat on the mat. a dog ran in the fog. " * 40)
    overrides = ["data.seq_len=16", "data.batch_size=8", "model.n_layer=2", f"data.path={text}",
                 "data.tokenizer=char", f"export.dir={tmp_path}"]  # fmt: skip
    result = compare(RECIPE, steps=4, out=tmp_path / "report", overrides=overrides, speed_steps=0)
    assert result.verdicts == dict.fromkeys(SECTIONS, "PASS"), result.text
    assert "lora.adapters." in result.text  # the gradients' worst tensor is an adapter's


@pytest.mark.slow
def test_the_shipped_recipe_fine_tunes_a_base_in_both_frameworks(tmp_path):
    """The README's commands: zoo finetune RECIPE --from BASE [--framework keras], then the PEFT
    files and the merged checkpoint from the adapter."""
    text = tmp_path / "text.txt"
    text.write_text("the cat sat on the mat. a dog ran in the fog. " * 40)
    sets = [f"data.path={text}", "data.seq_len=16", "data.batch_size=8", "trainer.max_epochs=1",
            "trainer.progress_bar=false", "tracking.tensorboard=false",
            f"export.dir={tmp_path / 'runs'}"]  # fmt: skip
    flags = [a for s in sets for a in ("--set", s)]
    base_recipe = RECIPE.parent / "gpt2-micro-pydocs.yaml"
    made = CliRunner().invoke(main, ["train", str(base_recipe), "--json", *flags])
    assert made.exit_code == 0, made.output
    base_path = Path(json.loads(made.stdout)["checkpoint"])
    adapters = {}
    for framework in FRAMEWORKS:
        args = ["finetune", str(RECIPE), "--from", str(base_path), "--framework", framework, "--json", *flags]
        tuned = CliRunner().invoke(main, args)
        assert tuned.exit_code == 0, tuned.output
        adapters[framework] = read_adapter(json.loads(tuned.stdout)["checkpoint"])
        assert adapters[framework].base["path"] == str(base_path.resolve())
        assert (Path(adapters[framework].path).parent / "tokenizer.json").is_file()
    assert adapters["lightning"].base["sha256"] == adapters["keras"].base["sha256"]
    for verb in (
        ["export", "--format", "peft", "--out", str(tmp_path / "peft")],
        ["merge", "--out", str(tmp_path / "m")],
    ):
        done = CliRunner().invoke(main, [verb[0], str(adapters["keras"].path), *verb[1:]])
        assert done.exit_code == 0, done.output
    assert read_checkpoint(tmp_path / "m" / "model.safetensors").config == read_checkpoint(base_path).config


@pytest.mark.parametrize(
    ("framework", "strategy"),
    [("lightning", "ddp"), pytest.param("keras", "mirrored", marks=pytest.mark.slow)],
)
def test_two_replicas_train_the_one_device_adapter(framework, strategy, tmp_path):
    """As tests/test_distributed.py for full training (SGD, no dropout): Lightning DDP over two
    processes and Keras' MirroredStrategy over two logical CPUs end with the adapter of one
    device, written alone by rank 0, on a base that did not move."""
    import yaml

    raw = tiny_recipe(tmp_path, None, seed=3, num_threads=1, framework=framework)
    raw["model"] |= {"resid_dropout": 0.0, "embd_dropout": 0.0, "attn_dropout": 0.0}  # one mask per replica
    raw["optimizer"] = {"name": "sgd", "lr": 0.05, "momentum": 0.9}  # (0.5 amplifies float32 rounding)
    raw["init"]["lora"]["train_bias"] = "none"
    (tmp_path / "text.txt").write_text("the cat sat on the mat. a dog ran in the fog. " * 39)
    raw["data"]["batch_size"] = 10  # 100 training sequences: every batch splits evenly over two replicas
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(yaml.safe_dump(raw))
    env = {**os.environ, "ZOO_DDP_TIMEOUT_S": "60", "TF_CPP_MIN_LOG_LEVEL": "2"}
    adapters, runs = {}, {"single": [], "parallel": [f"trainer.strategy={strategy}", "trainer.devices=2"]}
    for name, sets in runs.items():
        args = [a for s in [f"export.run_name={name}", *sets] for a in ("--set", s)]
        done = warm_zoo.run([sys.executable, "-m", "zoo.cli", "train", str(recipe), *args],
                              env=env, capture_output=True, text=True, timeout=240)  # fmt: skip
        assert done.returncode == 0, done.stderr[-3000:]
        run_dir = tmp_path / "runs" / name
        assert not (run_dir / "model.safetensors").exists() and (run_dir / "adapter.safetensors").is_file()
        adapters[name] = read_adapter(run_dir / "adapter.safetensors")
        replicas = json.loads((run_dir / "summary.json").read_text())["metrics"]["replicas"]
        assert replicas == (2 if sets else 1)
    assert not (tmp_path / "runs" / "parallel-2").exists(), "the second rank must not create a run folder"
    single, parallel = adapters["single"], adapters["parallel"]
    family, config = single.family, single.config
    assert single.base["sha256"] == parallel.base["sha256"] == base_digest(seeded(family, config, 3))
    assert single.tensors.keys() == parallel.tensors.keys() == set(single.adapter.tensor_names())
    assert all(np.abs(parallel.tensors[f"{p.name}.lora_B"]).max() > 0 for p in parallel.adapter.points)
    assert max(max_diff(single.tensors[k], parallel.tensors[k]) for k in single.tensors) <= 1e-5
