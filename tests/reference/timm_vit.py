"""timm's VisionTransformer as the vit family's oracle (run in the reference environment).

``timm_vit.py OUT`` writes, for the tests in zoo's environment:

- ``counts.json``: trainable parameters of timm's vit_{tiny,small,base}_patch16_224;
- ``init.json``: the sha256 of every tensor of ``vit_tiny_patch16_224`` built right after
  ``torch.manual_seed(0)``, so zoo's torch twin can show it initialises bit for bit as timm does;
- for each parity case (``tiny``: vit_tiny_patch16_224 at 3 x 224 x 224, 1000 classes;
  ``base-shallow``: vit_base_patch16_224 cut to 2 blocks, 3 x 48 x 48, 10 classes): timm's model,
  seeded, with what its initialisation leaves trivial randomised (LayerNorm weights and biases,
  every bias, the class token) and the attention and MLP weights scaled so that attention is far
  from uniform (a near-uniform softmax hides a mixed-up head or token order); saved by timm's own
  ``save_for_hf`` as ``CASE/model.safetensors`` + ``CASE/config.json``; ``CASE-inputs.npy`` (a batch
  of 2) and timm's logits in eval and train mode (dropout 0: they agree) ``CASE-{eval,train}.npy``,
  and its final-norm tokens ``CASE-features.npy``;
- ``resample-G.npy``: timm's ``resample_abs_pos_embed`` (its defaults) of ``tiny``'s position
  embedding to a G x G grid, for G in GRIDS;
- ``finetune-S-cC.safetensors``: what timm loads from ``tiny/model.safetensors`` into a model of
  image size S and C channels (5 classes) with ``pretrained=True``: its position embedding resampled
  and its patch convolution adapted to C channels by timm's checkpoint filter (its head is new).

``timm_vit.py OUT exported DIR INPUTS`` loads a ViT that zoo exported to DIR (model.safetensors +
config.json) both ways timm reads a local checkpoint (``create_model("local-dir:DIR",
pretrained=True)`` and ``create_model(architecture, pretrained=True,
pretrained_cfg_overlay=dict(file=..., **pretrained_cfg), **model_args)``), writes each one's
eval-mode logits on INPUTS (``local-dir.npy``, ``file.npy``) and, in ``loaded.json``, the tensors of
each model that are not exactly the file's (none, when timm loaded every one strictly).
"""

import hashlib
import json
import sys
from pathlib import Path

import numpy as np
import shim  # noqa: F401  (before timm)
import timm
import timm.data
import torch
from safetensors.torch import load_file, save_file
from timm.layers import resample_abs_pos_embed
from timm.models import _hub

SEED = 0
CASES = {
    "tiny": ("vit_tiny_patch16_224", {}, 224),
    "base-shallow": ("vit_base_patch16_224", {"depth": 2, "img_size": 48, "num_classes": 10}, 48),
}
GRIDS = (3, 7, 24)
FINETUNE = ((112, 1), (64, 2), (224, 4))  # image size, channels


def trainable(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def digests(model: torch.nn.Module) -> dict[str, str]:
    return {
        k: hashlib.sha256(v.contiguous().numpy().tobytes()).hexdigest() for k, v in model.state_dict().items()
    }


@torch.no_grad()
def randomise(model: torch.nn.Module, generator: torch.Generator) -> None:
    """Nothing trivial left, and attention that is far from uniform."""
    for name, p in model.named_parameters():
        noise = torch.randn(p.shape, generator=generator)
        if ".norm" in name or name.startswith("norm."):
            p.copy_(1.0 + 0.2 * noise if name.endswith("weight") else 0.1 * noise)
        elif name.endswith("bias"):
            p.copy_(0.1 * noise)
        elif name in ("cls_token", "pos_embed"):
            p.copy_(0.5 * noise)
        elif p.ndim == 2:  # a Linear: N(0, 1 / fan_in)
            p.copy_(noise / p.shape[1] ** 0.5)


def logits(model: torch.nn.Module, x: torch.Tensor, training: bool) -> np.ndarray:
    model.train(training)
    with torch.no_grad():
        return model(x).numpy()


def fixtures(out: Path) -> None:
    names = [f"vit_{size}_patch16_224" for size in ("tiny", "small", "base")]
    (out / "counts.json").write_text(json.dumps({n: trainable(timm.create_model(n)) for n in names}))
    torch.manual_seed(SEED)
    (out / "init.json").write_text(json.dumps(digests(timm.create_model("vit_tiny_patch16_224")), indent=1))

    generator = torch.Generator().manual_seed(SEED)
    rng = np.random.default_rng(SEED)
    for case, (name, args, size) in CASES.items():
        torch.manual_seed(SEED)
        model = timm.create_model(name, **args)
        randomise(model, generator)
        _hub.save_for_hf(model, str(out / case), safe_serialization=True)
        x = torch.from_numpy(rng.normal(size=(2, 3, size, size)).astype(np.float32))
        np.save(out / f"{case}-inputs.npy", x.numpy())
        np.save(out / f"{case}-eval.npy", logits(model, x, training=False))
        np.save(out / f"{case}-train.npy", logits(model, x, training=True))
        model.eval()
        with torch.no_grad():
            np.save(out / f"{case}-features.npy", model.forward_features(x).numpy())

    tiny = load_file(out / "tiny" / "model.safetensors")
    for grid in GRIDS:
        resampled = resample_abs_pos_embed(tiny["pos_embed"], new_size=(grid, grid), num_prefix_tokens=1)
        np.save(out / f"resample-{grid}.npy", resampled.numpy())
    for size, channels in FINETUNE:
        model = timm.create_model(
            "vit_tiny_patch16_224",
            pretrained=True,
            img_size=size,
            in_chans=channels,
            num_classes=5,
            pretrained_cfg_overlay=dict(file=str(out / "tiny" / "model.safetensors"), custom_load=False),
        )
        state = {k: v.contiguous() for k, v in model.state_dict().items() if not k.startswith("head.")}
        save_file(state, out / f"finetune-{size}-c{channels}.safetensors")


def exported(out: Path, folder: str, inputs: str) -> None:
    x = torch.from_numpy(np.load(inputs))
    weights = Path(folder) / "model.safetensors"
    written = load_file(weights)
    config = json.loads((Path(folder) / "config.json").read_text())
    overlay = dict(config["pretrained_cfg"], file=str(weights))
    models = {
        "local-dir": timm.create_model(f"local-dir:{folder}", pretrained=True),
        "file": timm.create_model(
            config["architecture"], pretrained=True, pretrained_cfg_overlay=overlay, **config["model_args"]
        ),
    }
    loaded, data = {}, {}
    for route, model in models.items():
        np.save(out / f"{route}.npy", logits(model, x, training=False))
        resolved = timm.data.resolve_data_config(model=model)  # what timm's users feed the model
        eval_resize = timm.data.create_transform(**resolved).transforms[0].size
        data[route] = {k: list(v) if isinstance(v, tuple) else v for k, v in resolved.items()}
        data[route]["resize"] = eval_resize if isinstance(eval_resize, int) else list(eval_resize)
        state = model.state_dict()
        loaded[route] = sorted(
            k for k in set(state) | set(written) if k not in state or k not in written
            or not torch.equal(state[k], written[k])
        )  # fmt: skip
    (out / "loaded.json").write_text(json.dumps(loaded))
    (out / "data_config.json").write_text(json.dumps(data))


if __name__ == "__main__":
    torch.set_num_threads(1)
    target = Path(sys.argv[1])
    target.mkdir(parents=True, exist_ok=True)
    if len(sys.argv) > 2 and sys.argv[2] == "exported":
        exported(target, *sys.argv[3:5])
    else:
        fixtures(target)
