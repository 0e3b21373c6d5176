"""Named CNN configs. Data-decided fields (classes, input size) are left to the data."""

from zoo.family import Preset

PRESETS = (
    Preset(
        "convnet-tiny",
        "Two-stage plain ConvNet, 8/16 channels: for quick tests.",
        {"channels": [8, 16], "hidden": 32},
    ),
    Preset(
        "convnet-small",
        "Two-stage plain ConvNet with max-pooling and a 128-wide hidden layer.",
        {"channels": [32, 64], "hidden": 128, "dropout": 0.25},
    ),
    Preset(
        "resnet-8",
        "ResNet-style: stem + three stages of one basic block (16/32/64), BatchNorm, strided "
        "downsampling, global average pooling.",
        {
            "channels": [16, 32, 64],
            "residual": True,
            "batch_norm": True,
            "downsample": "stride",
            "head": "avgpool",
            "hidden": None,
        },
    ),
)
