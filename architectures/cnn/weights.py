"""The CNN weight table: torch ``state_dict`` names <-> Keras variables, layer by layer."""

from __future__ import annotations

from architectures.cnn.config import CNNConfig
from zoo.checkpoint.tables import Port, batchnorm, conv2d, dense


def _conv_bn(name: str, cfg: CNNConfig, cin: int, cout: int, kernel: int) -> list[Port]:
    ports = [conv2d(f"{name}.conv", cin, cout, kernel, bias=not cfg.batch_norm)]
    if cfg.batch_norm:
        ports.append(batchnorm(f"{name}.bn", cout))
    return ports


def table(cfg: CNNConfig) -> list[Port]:
    k = cfg.kernel_size
    ports = _conv_bn("stem", cfg, cfg.in_channels, cfg.stem_width, k)
    cin = cfg.stem_width
    for s, cout in enumerate(cfg.channels):
        for b, stride in enumerate(cfg.strides(s)):
            name = f"stages.{s}.{b}"
            if cfg.residual:
                ports += _conv_bn(f"{name}.first", cfg, cin, cout, k)
                ports += _conv_bn(f"{name}.second", cfg, cout, cout, k)
                if stride != 1 or cin != cout:
                    ports += _conv_bn(f"{name}.shortcut", cfg, cin, cout, 1)
            else:
                ports += _conv_bn(name, cfg, cin, cout, k)
            cin = cout
    features = cfg.head_features()
    flatten = (cin, cfg.feature_size(), cfg.feature_size()) if cfg.head == "flatten" else None
    if cfg.hidden:
        ports.append(dense("head.hidden", features, cfg.hidden, flatten_chw=flatten))
        features, flatten = cfg.hidden, None
    ports.append(dense("head.fc", features, cfg.num_classes, flatten_chw=flatten))
    return ports
