"""torchvision's and timm's ConvNeXts as the convnext family's oracle (run in the reference environment).

``torchvision_convnext.py OUT`` writes, for the tests in zoo's environment:

- ``counts.json``: trainable parameters of torchvision's and timm's convnext_{tiny,small,base}
  (1000 classes);
- ``init.json``: the sha256 of every tensor of timm's ConvNeXt at micro shape (``MICRO``, 10 classes)
  built right after ``torch.manual_seed(0)``, and of torchvision's of the same shape, so zoo's torch
  twin can show it initialises bit for bit as timm does;
- for each case of ``CASES``: the library's model, seeded, with every tensor randomised (convolution
  and linear weights N(0, 1/fan_in), biases, LayerNorm weights and biases, and the layer scale at
  0.5..1.5, where 1e-6 would hide every block behind its shortcut), saved the library's way
  (torchvision: ``NAME.pth``, ``torch.save`` of the state dict; timm: ``save_for_hf`` to ``NAME/``,
  ``model.safetensors`` + ``config.json``), with its outputs on ``NAME-inputs.npy`` (a batch of 2) in
  eval mode (``NAME-eval.npy``) and in train mode with stochastic depth 0 (``NAME-train.npy``): logits,
  or for timm's ``num_classes=0`` model the pooled, normalised features;
- ``inputs.npy``: the batch (2 x 3 x 64 x 64) the 3-channel cases read.

``torchvision_convnext.py OUT exported NAME_OR_DIR INPUTS`` loads weights zoo exported: a file
(.pth or .safetensors) into torchvision's ``ConvNeXt`` of the shape the file has, with
``load_state_dict(strict=True)``; a directory into timm both ways timm reads a local checkpoint. It
writes each model's eval-mode output on INPUTS (``torchvision.npy`` / ``local-dir.npy`` /
``file.npy``) and, in ``loaded.json``, per model the tensors that are not exactly the file's (none,
when the library took every one as written).
"""

import hashlib
import json
import re
import sys
from pathlib import Path

import numpy as np
import shim  # noqa: F401  (before torchvision and timm)
import timm
import torch
from safetensors.torch import load_file
from timm.models import _hub
from torchvision.models import convnext

SEED = 0
SIZES = ("tiny", "small", "base")
MICRO = {"depths": [1, 1, 2, 1], "dims": [16, 32, 64, 128]}
# case -> (library, constructor arguments, input channels, input side)
CASES = {
    "torchvision-micro": ("torchvision", {**MICRO, "num_classes": 10}, 3, 64),
    "torchvision-tiny": ("torchvision", {"size": "tiny", "num_classes": 10}, 3, 64),
    "timm-tiny": ("timm", {"name": "convnext_tiny", "num_classes": 10}, 3, 64),
    "timm-micro-gray": (
        "timm",
        {"name": "convnext_tiny", **MICRO, "num_classes": 7, "in_chans": 1, "patch_size": 1},
        1,
        16,
    ),
    "timm-micro-features": ("timm", {"name": "convnext_tiny", **MICRO, "num_classes": 0}, 3, 64),
}


def trainable(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def digests(model: torch.nn.Module) -> dict[str, str]:
    return {
        k: hashlib.sha256(v.contiguous().numpy().tobytes()).hexdigest() for k, v in model.state_dict().items()
    }


def torchvision_convnext(depths, dims, num_classes: int) -> convnext.ConvNeXt:
    """torchvision's ConvNeXt of any four-stage shape (its factories fix tiny/small/base/large)."""
    setting = [
        convnext.CNBlockConfig(dim, dims[i + 1] if i + 1 < len(dims) else None, depth)
        for i, (depth, dim) in enumerate(zip(depths, dims, strict=True))
    ]
    return convnext.ConvNeXt(setting, num_classes=num_classes)


def build(library: str, args: dict) -> torch.nn.Module:
    args = dict(args)
    if library == "torchvision":
        if "size" in args:
            # stochastic depth 0 (the factory's default is 0.1), so that train mode is deterministic
            return getattr(convnext, f"convnext_{args.pop('size')}")(stochastic_depth_prob=0.0, **args)
        return torchvision_convnext(args["depths"], args["dims"], args["num_classes"])
    return timm.create_model(args.pop("name"), **args)


@torch.no_grad()
def randomise(model: torch.nn.Module, generator: torch.Generator) -> None:
    """Nothing trivial left: every weight, bias, norm parameter and layer scale random."""
    for name, p in model.named_parameters():
        noise = torch.randn(p.shape, generator=generator)
        if name.endswith(("gamma", "layer_scale")):
            p.copy_(0.5 + torch.rand(p.shape, generator=generator))
        elif p.ndim == 1 and name.endswith("weight"):  # a LayerNorm
            p.copy_(1.0 + 0.2 * noise)
        elif name.endswith("bias"):
            p.copy_(0.1 * noise)
        else:  # a convolution or a linear layer: N(0, 1 / fan_in)
            p.copy_(noise / (p[0].numel() ** 0.5))


def outputs(model: torch.nn.Module, x: torch.Tensor, training: bool) -> np.ndarray:
    model.train(training)
    with torch.no_grad():
        return model(x).numpy()


def fixtures(out: Path) -> None:
    counts = {
        "torchvision": {size: trainable(getattr(convnext, f"convnext_{size}")()) for size in SIZES},
        "timm": {size: trainable(timm.create_model(f"convnext_{size}")) for size in SIZES},
    }
    (out / "counts.json").write_text(json.dumps(counts, indent=1))
    torch.manual_seed(SEED)
    timm_init = digests(timm.create_model("convnext_tiny", **MICRO, num_classes=10))
    torch.manual_seed(SEED)
    torchvision_init = digests(torchvision_convnext(MICRO["depths"], MICRO["dims"], 10))
    (out / "init.json").write_text(json.dumps({"timm": timm_init, "torchvision": torchvision_init}, indent=1))

    generator = torch.Generator().manual_seed(SEED)
    rng = np.random.default_rng(SEED)
    np.save(out / "inputs.npy", rng.normal(size=(2, 3, 64, 64)).astype(np.float32))
    for case, (library, args, channels, side) in CASES.items():
        torch.manual_seed(SEED)
        model = build(library, args)
        randomise(model, generator)
        if library == "torchvision":
            torch.save(model.state_dict(), out / f"{case}.pth")
        else:
            _hub.save_for_hf(model, str(out / case), safe_serialization=True)
        if channels == 3 and side == 64:
            x = np.load(out / "inputs.npy")
        else:
            x = rng.normal(size=(2, channels, side, side)).astype(np.float32)
        np.save(out / f"{case}-inputs.npy", x)
        for mode in ("eval", "train"):
            np.save(out / f"{case}-{mode}.npy", outputs(model, torch.from_numpy(x), mode == "train"))


def _unequal(state: dict, written: dict) -> list[str]:
    keys = set(state) | set(written)
    return sorted(
        k for k in keys if k not in state or k not in written or not torch.equal(state[k], written[k])
    )


def exported(out: Path, path: str, inputs: str) -> None:
    x = torch.from_numpy(np.load(inputs))
    path = Path(path)
    loaded = {}
    if path.is_dir():
        weights = path / "model.safetensors"
        config = json.loads((path / "config.json").read_text())
        overlay = dict(config["pretrained_cfg"], file=str(weights))
        models = {
            "local-dir": timm.create_model(f"local-dir:{path}", pretrained=True),
            "file": timm.create_model(
                config["architecture"],
                pretrained=True,
                pretrained_cfg_overlay=overlay,
                **config["model_args"],
            ),
        }
        written = load_file(weights)
    else:
        written = load_file(path) if path.suffix == ".safetensors" else torch.load(path, weights_only=True)
        stages = sorted(
            {int(m.group(1)) for k in written if (m := re.match(r"features\.(\d+)\.0\.block", k))}
        )
        depths = [
            1 + max(int(k.split(".")[2]) for k in written if k.startswith(f"features.{s}.")) for s in stages
        ]
        dims = [int(written[f"features.{s}.0.block.0.weight"].shape[0]) for s in stages]
        model = torchvision_convnext(depths, dims, int(written["classifier.2.weight"].shape[0]))
        model.load_state_dict(written, strict=True)
        models = {"torchvision": model}
    for route, model in models.items():
        np.save(out / f"{route}.npy", outputs(model, x, training=False))
        loaded[route] = _unequal(model.state_dict(), written)
    (out / "loaded.json").write_text(json.dumps(loaded))


if __name__ == "__main__":
    torch.set_num_threads(1)
    target = Path(sys.argv[1])
    target.mkdir(parents=True, exist_ok=True)
    if len(sys.argv) > 2 and sys.argv[2] == "exported":
        exported(target, *sys.argv[3:5])
    else:
        fixtures(target)
