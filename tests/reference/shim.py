"""Import this before torchvision or timm in the reference environment.

torchvision's PyPI wheel is a CUDA build: next to the CPU torch its C extension does not
load, and ``import torchvision`` fails with "operator torchvision::nms does not exist" while
registering fake kernels for ops that were never defined. Defining the two schemas first lets
the pure-Python models (all that the reference tests use) import and run.
"""

import torch

_LIBRARY = torch.library.Library("torchvision", "DEF")
for _op in ("nms", "qnms"):
    _LIBRARY.define(f"{_op}(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
