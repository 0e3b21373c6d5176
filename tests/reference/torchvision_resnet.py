"""torchvision's and timm's ResNets as the resnet family's oracle (run in the reference environment).

``torchvision_resnet.py OUT`` writes, for the tests in zoo's environment:

- ``counts.json``: trainable parameters of torchvision's and timm's resnet18/34/50/101 (1000 classes);
- ``init.json``: the sha256 of every tensor of ``torchvision.models.resnet18(num_classes=10)`` and of
  ``resnet50(num_classes=10, zero_init_residual=True)`` built right after ``torch.manual_seed(0)``,
  so zoo's torch twin can show it initialises bit for bit as torchvision does;
- for resnet18 and resnet50 (10 classes): torchvision's model with every BatchNorm tensor randomised
  (weight, bias, running statistics, num_batches_tracked: fresh statistics of 0 and 1 would hide a
  mapping error), saved as ``NAME.pth`` (``torch.save`` of the state dict), as
  ``NAME.safetensors`` for resnet18, and through timm: the same tensors loaded into
  ``timm.create_model(NAME)`` (strict) and written by timm's own ``save_for_hf`` to ``NAME-timm/``
  (``model.safetensors`` + ``config.json``);
- ``inputs.npy`` (a 2 x 3 x 64 x 64 batch) and each library's logits in eval mode and in train mode
  (batch statistics), ``NAME-LIBRARY-{eval,train}.npy``, and the BatchNorm buffers torchvision's
  train-mode pass leaves (``NAME-after-train.safetensors``).

``torchvision_resnet.py OUT exported NAME INPUTS PATH...`` loads weights zoo exported: a file
(.pth or .safetensors) into ``torchvision.models.NAME(num_classes=...)`` with
``load_state_dict(strict=True)``, a directory into timm both ways timm reads a local checkpoint
(``create_model("local-dir:DIR", pretrained=True)``, and ``create_model(architecture,
pretrained=True, pretrained_cfg_overlay=dict(file=...), **model_args)`` from its config.json); it
writes each one's eval-mode logits on INPUTS as ``I-torchvision.npy`` / ``I-timm-local-dir.npy`` /
``I-timm-file.npy`` (I: the path's position).
"""

import hashlib
import json
import sys
from pathlib import Path

import numpy as np
import shim  # noqa: F401  (before torchvision and timm)
import timm
import torch
import torchvision
from safetensors.torch import load_file, save_file
from timm.models import _hub

NAMES = ("resnet18", "resnet34", "resnet50", "resnet101")
PARITY = ("resnet18", "resnet50")
CLASSES = 10
SEED = 0


def trainable(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def digests(model: torch.nn.Module) -> dict[str, str]:
    return {
        k: hashlib.sha256(v.contiguous().numpy().tobytes()).hexdigest() for k, v in model.state_dict().items()
    }


def randomise_batchnorm(model: torch.nn.Module, generator: torch.Generator) -> None:
    for module in model.modules():
        if isinstance(module, torch.nn.BatchNorm2d):
            c = module.num_features
            with torch.no_grad():
                module.weight.copy_(torch.rand(c, generator=generator) + 0.5)
                module.bias.copy_(torch.randn(c, generator=generator) * 0.2)
                module.running_mean.copy_(torch.randn(c, generator=generator) * 0.2)
                module.running_var.copy_(torch.rand(c, generator=generator) * 1.5 + 0.5)
                module.num_batches_tracked.fill_(int(torch.randint(1, 10_000, (), generator=generator)))


def logits(model: torch.nn.Module, x: torch.Tensor, training: bool) -> np.ndarray:
    model.train(training)
    with torch.no_grad():
        return model(x).numpy()


def fixtures(out: Path) -> None:
    counts = {
        "torchvision": {name: trainable(getattr(torchvision.models, name)()) for name in NAMES},
        "timm": {name: trainable(timm.create_model(name)) for name in NAMES},
    }
    (out / "counts.json").write_text(json.dumps(counts, indent=1))

    torch.manual_seed(SEED)
    plain = torchvision.models.resnet18(num_classes=CLASSES)
    torch.manual_seed(SEED)
    zero_init = torchvision.models.resnet50(num_classes=CLASSES, zero_init_residual=True)
    init = {"resnet18": digests(plain), "resnet50-zero-init-residual": digests(zero_init)}
    (out / "init.json").write_text(json.dumps(init, indent=1))

    x = torch.from_numpy(np.random.default_rng(SEED).normal(size=(2, 3, 64, 64)).astype(np.float32))
    np.save(out / "inputs.npy", x.numpy())
    generator = torch.Generator().manual_seed(SEED)
    for name in PARITY:
        torch.manual_seed(SEED)
        reference = getattr(torchvision.models, name)(num_classes=CLASSES)
        randomise_batchnorm(reference, generator)
        state = reference.state_dict()
        torch.save(state, out / f"{name}.pth")
        if name == "resnet18":
            save_file({k: v.contiguous() for k, v in state.items()}, out / f"{name}.safetensors")
        other = timm.create_model(name, num_classes=CLASSES)
        other.load_state_dict(state, strict=True)
        _hub.save_for_hf(other, str(out / f"{name}-timm"), safe_serialization=True)
        for library, model in (("torchvision", reference), ("timm", other)):
            np.save(out / f"{name}-{library}-eval.npy", logits(model, x, training=False))
            np.save(out / f"{name}-{library}-train.npy", logits(model, x, training=True))
        buffers = {k: v for k, v in reference.state_dict().items() if "running" in k or "num_batches" in k}
        save_file(buffers, out / f"{name}-after-train.safetensors")


def exported(out: Path, name: str, inputs: str, *paths: str) -> None:
    """Eval-mode logits of each exported path: a file as torchvision's, a directory as timm's."""
    x = torch.from_numpy(np.load(inputs))
    for index, path in enumerate(map(Path, paths)):
        if path.is_dir():
            local = timm.create_model(f"local-dir:{path}", pretrained=True)
            np.save(out / f"{index}-timm-local-dir.npy", logits(local, x, training=False))
            config = json.loads((path / "config.json").read_text())
            overlay = dict(config["pretrained_cfg"], file=str(path / "model.safetensors"))
            arguments = config.get("model_args", {})
            by_file = timm.create_model(
                config["architecture"], pretrained=True, pretrained_cfg_overlay=overlay, **arguments
            )
            np.save(out / f"{index}-timm-file.npy", logits(by_file, x, training=False))
            continue
        state = load_file(path) if path.suffix == ".safetensors" else torch.load(path, weights_only=True)
        reference = getattr(torchvision.models, name)(num_classes=state["fc.weight"].shape[0])
        reference.load_state_dict(state, strict=True)
        np.save(out / f"{index}-torchvision.npy", logits(reference, x, training=False))


if __name__ == "__main__":
    torch.set_num_threads(1)
    target = Path(sys.argv[1])
    target.mkdir(parents=True, exist_ok=True)
    if len(sys.argv) > 2 and sys.argv[2] == "exported":
        exported(target, *sys.argv[3:])
    else:
        fixtures(target)
