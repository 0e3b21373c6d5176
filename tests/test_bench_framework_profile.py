"""bench/framework_profile.py: its op categories, and a smoke run end to end on resnet-micro at
16x16 (both frameworks profiled, the xplane parsed, the kernels timed alone, the report written)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from bench_scripts import load_bench_script

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "bench" / "framework_profile.py"


@pytest.fixture(scope="module")
def bench():
    return load_bench_script("framework_profile")


@pytest.mark.parametrize(
    ("op", "context", "expected"),
    [
        # torch: aten names, the enclosing events as context
        ("convolution_backward", "evaluate_function: ConvolutionBackward0", "conv backward"),
        ("mkldnn_convolution", "aten::conv2d/aten::convolution/aten::_convolution", "conv forward"),
        ("mul_", "Optimizer.step#AdamW.step", "optimizer"),
        ("mkldnn_rnn_layer_backward", "MkldnnRnnLayerBackward0", "recurrent cell"),
        ("bernoulli_", "aten::dropout", "dropout"),
        ("_log_softmax", "aten::cross_entropy_loss/aten::log_softmax", "loss"),
        ("_softmax", "aten::softmax", "attention softmax"),
        ("native_batch_norm", "aten::batch_norm", "normalization"),
        ("addmm", "aten::linear", "matmul"),
        ("copy_", "aten::contiguous/aten::clone", "data movement"),
        # TensorFlow: op types, the name scope as context
        ("Conv2DBackpropFilter", "gradient_tape/res_net/torch_conv2d/convolution", "conv backward"),
        ("_MklNativeConv2D", "res_net/torch_conv2d/convolution", "conv forward"),
        ("_MklNativeConv2DBackpropInput", "gradient_tape/res_net/torch_conv2d", "conv backward"),
        ("Sub", "adam_w/Sub_3", "optimizer"),
        ("Mul", "res_net/basic_block/batch_norm/mul", "normalization"),
        ("MatMul", "gradient_tape/recurrent_net_1/rnn_1/while", "recurrent cell"),
        ("SelectV2", "gpt2_1/block_1/self_attention_1/SelectV2", "attention softmax"),
        ("StatelessRandomUniformV2", "gpt2_1/block_1/mlp_1/dropout_4_1", "dropout"),
        ("SparseSoftmaxCrossEntropyWithLogits", "compile_loss/sparse_categorical_crossentropy", "loss"),
        ("BatchMatMulV2", "gpt2_1/block_1/self_attention_1/MatMul", "matmul"),
        ("_MklMatMul", "recurrent_net_1/tied_head_1/Tensordot", "matmul"),
        ("UnsortedSegmentSum", "AddN/inputs_1", "embedding"),
        ("ReluGrad", "gradient_tape/res_net/ReluGrad", "elementwise"),
    ],
)
def test_categories(bench, op, context, expected):
    assert bench.category(op, context) == expected


@pytest.mark.slow
def test_smoke_run_profiles_both_frameworks(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "2"}
    command = [sys.executable, str(SCRIPT), "--presets", "resnet-micro", "--steps", "1"]
    command += ["--out", str(tmp_path)]
    done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, env=env, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads((tmp_path / "framework_profile.json").read_text())["presets"]["resnet-micro"]
    for framework in ("lightning", "keras"):
        run = result[framework]
        assert run["step_ms"] > 0 and run["profiled_ms"] > 0
        assert all(ms >= 0 for ms in run["categories"].values())
        assert run["categories"]["conv forward"] > 0 and run["categories"]["conv backward"] > 0
        # Self times never add up to more than the wall time, and a toy step's ops hold at
        # least a fifth of it (the rest is each framework's runtime).
        assert 0.2 < run["coverage"] <= 1.05, run["coverage"]
        assert len(run["top"]) == 8
    passes = {row[2] for row in result["kernels"]}
    assert passes == {"forward", "backward-input", "backward-filter"}
    assert all(row[4] > 0 and row[5] > 0 for row in result["kernels"])
    for name in ("conv forward", "conv backward", "optimizer", "runtime", "coverage"):
        assert f"| {name} " in done.stdout
    assert "The largest gap is" in result["explanation"]
    assert (tmp_path / "framework_profile.md").read_text().strip() == done.stdout.strip()
