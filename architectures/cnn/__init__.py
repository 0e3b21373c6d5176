"""CNN family: plain ConvNets and ResNet-style nets for image classification."""

from architectures.cnn.config import CNNConfig
from architectures.cnn.presets import PRESETS
from architectures.cnn.weights import table
from zoo.family import Family, InputSpec

FAMILY = Family(
    name="cnn",
    description="Convolutional nets: plain ConvNet or ResNet-style, optional BatchNorm.",
    config=CNNConfig,
    inputs=InputSpec("image"),
    tasks=("classification",),
    weight_table=table,
    torch_model="architectures.cnn.torch_model:build",
    keras_model="architectures.cnn.keras_model:build",
    grad_checkpointing=("lightning", "keras"),
    presets=PRESETS,
)
