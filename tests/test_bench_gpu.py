"""bench/gpu.py: its arithmetic, its CPU smoke run end to end, and its real path on a GPU."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from bench_scripts import load_bench_script

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "bench" / "gpu.py"


@pytest.fixture(scope="module")
def bench():
    return load_bench_script("gpu")


def run_script(tmp_path: Path, *arguments: str, timeout: float) -> tuple[subprocess.CompletedProcess, dict]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "2"}
    done = subprocess.run(
        [sys.executable, str(SCRIPT), *arguments, "--out", str(tmp_path)],
        capture_output=True, text=True, cwd=ROOT, env=env, timeout=timeout,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return done, json.loads((tmp_path / "gpu.json").read_text())


# ------------------------------------------------------------------------ arithmetic


def test_flop_counting_and_mfu_arithmetic(bench):
    # A linear layer: 2 FLOPs per multiply-add, a forward of in x out per sample.
    linear = torch.nn.Linear(8, 4)
    assert bench.counted_forward_flops(linear, torch.zeros(1, 8)) == 2 * 8 * 4
    assert bench.counted_forward_flops(linear, torch.zeros(3, 8)) == 3 * 2 * 8 * 4
    # GPT-2 small at 1024 tokens: 6 N + 12 L d T per token.
    per_token = bench.transformer_flops_per_token(124_439_808, 12, 768, 1024)
    assert per_token == 6 * 124_439_808 + 12 * 12 * 768 * 1024
    # 10 samples/s of 1e12 FLOPs against a 989 TFLOP/s peak.
    assert bench.mfu(10.0, 1e12, 989e12) == pytest.approx(10e12 / 989e12)
    assert bench.mfu(10.0, 1e12, None) is None
    assert bench.peak_flops("NVIDIA H100 80GB HBM3") == 989e12
    assert bench.peak_flops("NVIDIA H100 PCIe") == 756e12
    assert bench.peak_flops("NVIDIA H200") == 989e12
    assert bench.peak_flops("NVIDIA A100-SXM4-80GB") == 312e12
    assert bench.peak_flops("NVIDIA GeForce RTX 3090") is None
    assert bench.peak_flops(None) is None


def test_resnet_flops_are_three_forward_passes(bench):
    import zoo
    from zoo import registry

    config = registry.resolve_config("resnet-micro", in_channels=3, image_size=16, num_classes=10)
    example = torch.zeros(1, 3, 16, 16).numpy()
    counted = bench.flops_per_sample("resnet-micro", config, example)
    model = zoo.create_model("resnet-micro", **config.model_dump()).eval()
    forward = bench.counted_forward_flops(model, torch.from_numpy(example))
    assert counted["flops"] == 3 * forward > 0
    assert counted["parameters"] == sum(p.numel() for p in model.parameters())


def test_report_of_an_unknown_gpu_and_a_failed_run(bench):
    run = {"preset": "gpt2", "precision": "bf16-mixed", "checkpointing": False, "batch": 16}
    results = {
        "gpu": "NVIDIA GeForce RTX 3090", "peak_flops": None, "smoke": False, "note": None, "compile": False,
        "steps": 10, "epochs": 3, "minutes": 1.0, "flops": {"gpt2": {"flops": 1e12, "how": "6 N"}},
        "runs": [
            {**run, "way": "raw-torch", "samples_per_s": 50.0, "tokens_per_s": 51200.0, "mfu": None,
             "peak_bytes": 3 * 2**30, "memory_source": "torch.cuda.max_memory_allocated"},
            {**run, "way": "zoo-lightning", "error": "boom"},
        ],
        "ratios": [{"preset": "gpt2", "precision": "bf16-mixed", "lightning": None, "keras": None}],
        "memory": [], "largest_batch": [],
    }  # fmt: skip
    text = bench.report(results)
    assert "NVIDIA GeForce RTX 3090: not in the peak table" in text and "no MFU" in text
    assert "| gpt2 | bf16-mixed | raw-torch | 16 | 50 | 51,200 | - | 3.00 GiB |" in text
    assert "| gpt2 | bf16-mixed | zoo-lightning | 16 | failed |" in text
    assert "no GPU" not in text


def test_out_of_memory_is_told_from_other_errors(bench):
    assert bench.out_of_memory(RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB"))
    assert bench.out_of_memory(torch.cuda.OutOfMemoryError("CUDA error"))
    assert bench.out_of_memory(RuntimeError("OOM when allocating tensor with shape[16,1024,50257]"))
    assert bench.out_of_memory(RuntimeError("Dst tensor is not initialized."))
    assert not bench.out_of_memory(ValueError("no room for the bloom filter"))
    assert not bench.out_of_memory(RuntimeError("shape mismatch"))


@pytest.mark.parametrize(
    ("limit", "cap", "expected", "capped"),
    [(0, 8, 0, False), (1, 8, 1, False), (5, 64, 5, False), (37, 1024, 37, False), (64, 64, 64, True),
     (1000, 48, 48, True), (1000, 1, 1, True)],
)  # fmt: skip
def test_largest_batch_doubles_then_bisects(bench, limit, cap, expected, capped):
    batch, was_capped, probes = bench.largest_batch(lambda b: b <= limit, cap)
    assert (batch, was_capped) == (expected, capped)
    assert all(ok == (b <= limit) for b, ok in probes)
    assert max(b for b, _ in probes) <= cap
    assert len(probes) <= 2 * max(cap, 1).bit_length() + 1


# ---------------------------------------------------------------------------- runs


@pytest.mark.slow
def test_cpu_smoke_runs_end_to_end(tmp_path):
    """The whole script on the CPU at tiny sizes: one preset, every way, the memory rows and
    the batch probes (capped at 1, one framework: the search's doubling and bisection are
    test_largest_batch_doubles_then_bisects'), in about a minute on two cores."""
    arguments = [
        "--cpu-smoke",
        "--presets",
        "gpt2-micro",
        "--probe-frameworks",
        "lightning",
        "--probe-cap",
        "1",
    ]
    done, results = run_script(tmp_path, *arguments, timeout=600)
    expected_note = "no GPU: CPU smoke run, figures are not GPU figures"
    if not torch.cuda.is_available():
        assert results["gpu"] is None and results["note"] == expected_note
        assert expected_note in done.stdout
    assert results["smoke"] and results["peak_flops"] is None
    runs = [r for r in results["runs"] if not r["checkpointing"]]
    assert sorted(r["way"] for r in runs) == sorted(
        ("raw-torch", "zoo-lightning", "plain-keras", "zoo-keras")
    )
    spec = {"seq": 32, "batch": 4}
    for run in results["runs"]:
        assert "error" not in run, run
        assert run["samples_per_s"] > 0
        assert run["tokens_per_s"] == pytest.approx(run["samples_per_s"] * spec["seq"])
        assert run["mfu"] is None  # no peak on the CPU
        assert run["samples"] == 2 * spec["batch"] and len(run["times"]) == 2
        assert 0 < run["peak_bytes"] < 2**36 and run["memory_source"]
    assert results["flops"]["gpt2-micro"]["flops"] > 0
    ratios = results["ratios"][0]
    assert ratios["lightning"] > 0 and ratios["keras"] > 0
    assert {m["framework"] for m in results["memory"]} == {"lightning", "keras"}
    for row in results["memory"]:
        assert row["plain_bytes"] > 0 and row["checkpointed_bytes"] > 0
    probes = results["largest_batch"]
    assert [p["checkpointing"] for p in probes] == [False, True]
    for probe in probes:
        assert "error" not in probe, probe
        assert probe["preset"] == "gpt2-micro" and probe["framework"] == "lightning"
        # Nothing runs out of memory on the CPU at this size: the search stops at the cap.
        assert probe["batch"] == 1 and probe["capped"] and probe["probes"] == [[1, True]]
        assert all(peak > 0 for peak in probe["peak_bytes"].values())
    assert "| gpt2-micro | bf16-mixed | raw-torch | 4 |" in (tmp_path / "gpu.md").read_text()


def test_without_a_gpu_it_says_so_and_stops(tmp_path):
    if torch.cuda.is_available():
        pytest.skip("a GPU is here")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == 1
    message = done.stderr.strip().splitlines()[-1]
    assert "no GPU" in message and "--cpu-smoke" in message
    assert not (tmp_path / "gpu.json").exists()


@pytest.mark.slow
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_gpu_path_at_a_small_size(tmp_path):
    """The real GPU path (not --cpu-smoke) at gpt2-micro: both mixed precisions, GPU memory
    figures, MFU where the GPU is in the peak table, a real batch search."""
    arguments = ["--presets", "gpt2-micro", "--steps", "4", "--probe-frameworks", "lightning,keras"]
    arguments += ["--probe-preset", "gpt2-micro", "--probe-cap", "64"]
    _, results = run_script(tmp_path, *arguments, timeout=1800)
    assert not results["smoke"] and results["gpu"]
    assert {r["precision"] for r in results["runs"]} == {"bf16-mixed", "16-mixed"}
    for run in results["runs"]:
        assert "error" not in run, run
        assert run["samples_per_s"] > 0 and run["peak_bytes"] > 0
        assert "GPU" in run["memory_source"] or "cuda" in run["memory_source"]
        if results["peak_flops"]:
            assert 0 < run["mfu"] < 1
    for probe in results["largest_batch"]:
        assert "error" not in probe, probe
        assert probe["batch"] >= 1
