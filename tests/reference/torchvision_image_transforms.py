"""torchvision's image transforms on a few generated files: the pixels zoo's image_folder must match.

    python torchvision_image_transforms.py OUT

Writes OUT/images/*.png|jpg (RGB, RGBA, palette, grayscale, JPEG; odd sizes, both
orientations), OUT/cases.json (what was applied to which file) and OUT/<case>.npy (the
float32 CHW tensor torchvision produced). Eval: Resize (bilinear, and bicubic as timm's models
are read) + CenterCrop + ToTensor + Normalize; training: F.resized_crop at explicit boxes
(+ F.hflip), ToTensor, Normalize. cases.json also holds the eval transforms of torchvision's
ImageNet ResNet weights (``ResNet18_Weights.IMAGENET1K_V1.transforms()``) and ConvNeXt weights
(``ConvNeXt_{Tiny,Small,Base,Large}_Weights.IMAGENET1K_V1.transforms()``, by size), which a
torchvision import records (no download: the transforms are the weights' metadata).
"""

import json
import sys
from pathlib import Path

import numpy as np
import shim  # noqa: F401  (before torchvision)
from PIL import Image
from torchvision import transforms
from torchvision.models import (
    ConvNeXt_Base_Weights,
    ConvNeXt_Large_Weights,
    ConvNeXt_Small_Weights,
    ConvNeXt_Tiny_Weights,
    ResNet18_Weights,
)
from torchvision.transforms import functional as F

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
GRAY_MEAN, GRAY_STD = (0.449,), (0.226,)


def images(folder: Path) -> list[str]:
    rng = np.random.default_rng(0)
    folder.mkdir(parents=True, exist_ok=True)
    smooth = np.linspace(0, 255, 61 * 47 * 3).reshape(47, 61, 3)
    made = {
        "rgb-wide.png": Image.fromarray(rng.integers(0, 256, (37, 53, 3), dtype=np.uint8), "RGB"),
        "rgb-tall.jpg": Image.fromarray(
            (smooth + rng.normal(0, 20, smooth.shape)).clip(0, 255).astype(np.uint8)
        ),
        "rgba.png": Image.fromarray(rng.integers(0, 256, (40, 33, 4), dtype=np.uint8), "RGBA"),
        "gray.png": Image.fromarray(rng.integers(0, 256, (29, 45), dtype=np.uint8), "L"),
        "palette.png": Image.fromarray(rng.integers(0, 256, (50, 50, 3), dtype=np.uint8)).convert("P"),
    }
    made["rgb-tall.jpg"] = made["rgb-tall.jpg"].transpose(Image.Transpose.TRANSPOSE)  # 61 high, 47 wide
    for name, image in made.items():
        image.save(folder / name, quality=90) if name.endswith(".jpg") else image.save(folder / name)
    return sorted(made)


def main(out: Path) -> None:
    names = images(out / "images")
    cases = []
    for name in names:
        for mode, mean, std in (("RGB", MEAN, STD), ("L", GRAY_MEAN, GRAY_STD)):
            image = Image.open(out / "images" / name).convert(mode)  # zoo's loader: decode, convert
            normalize = transforms.Compose([transforms.ToTensor(), transforms.Normalize(mean, std)])
            for resize, size, how in ((32, 28, "bilinear"), (24, 24, "bilinear"), (45, 17, "bilinear"),
                                      (32, 28, "bicubic")):  # fmt: skip
                mode_of = transforms.InterpolationMode(how)
                resized = transforms.Resize(resize, interpolation=mode_of)
                tensor = transforms.Compose([resized, transforms.CenterCrop(size)])(image)
                key = f"eval-{name}-{mode}-{resize}-{size}-{how}"
                np.save(out / f"{key}.npy", normalize(tensor).numpy())
                cases.append({"key": key, "file": name, "mode": mode, "resize": resize, "size": size,
                              "interpolation": how})  # fmt: skip
            width, height = image.size
            for top, left, h, w, flip in (
                (0, 0, height, width, False),
                (3, 5, 17, 23, True),
                (7, 2, 9, 30, False),
            ):
                tensor = F.resized_crop(image, top, left, h, w, [20, 20])
                tensor = F.hflip(tensor) if flip else tensor
                key = f"train-{name}-{mode}-{top}-{left}-{h}-{w}-{int(flip)}"
                np.save(out / f"{key}.npy", normalize(tensor).numpy())
                cases.append({"key": key, "file": name, "mode": mode, "box": [top, left, h, w], "flip": flip,
                              "size": 20})  # fmt: skip
    convnext_eval = {
        size: eval_transform(weights.IMAGENET1K_V1)
        for size, weights in (("tiny", ConvNeXt_Tiny_Weights), ("small", ConvNeXt_Small_Weights),
                              ("base", ConvNeXt_Base_Weights), ("large", ConvNeXt_Large_Weights))
    }  # fmt: skip
    (out / "cases.json").write_text(json.dumps({"mean": MEAN, "std": STD, "gray_mean": GRAY_MEAN,
                                                "gray_std": GRAY_STD, "cases": cases,
                                                "resnet_eval": eval_transform(ResNet18_Weights.IMAGENET1K_V1),
                                                "convnext_eval": convnext_eval}))  # fmt: skip


def eval_transform(weights) -> dict:
    """What a torchvision weights enum's ``transforms()`` does to an image at evaluation."""
    transform = weights.transforms()
    return {
        "size": list(transform.crop_size), "resize": list(transform.resize_size),
        "interpolation": transform.interpolation.value,
        "mean": list(transform.mean), "std": list(transform.std),
    }  # fmt: skip


if __name__ == "__main__":
    main(Path(sys.argv[1]))
