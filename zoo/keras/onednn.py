"""Whether TensorFlow runs its oneDNN kernels, as it decided when it was imported.

TensorFlow reads ``TF_ENABLE_ONEDNN_OPTS`` once, at import. Unset, it turns oneDNN on only on
x86 CPUs with neural-network instructions (AVX512-VNNI, AVX512-BF16, AMX): measured on, unset,
on an Intel CPU with AMX, and off on an AMD EPYC with AVX2 only. The switch moves both speed
and rounding: oneDNN's convolution input-gradient ran up to ~50x faster than Eigen's on ResNet-18's
small late maps (bench/RESULTS.md, "Framework against framework"), and its 3x3 convolutions
round ~4.5x more than torch's (docs/float32-relu-crossings.md). So what a report states, and
what a tolerance allows, comes from TensorFlow itself, not from the variable.
"""

from __future__ import annotations

import os


def onednn_enabled() -> bool:
    import tensorflow  # noqa: F401  (the decision is made when TensorFlow is imported)
    from tensorflow.python.util import _pywrap_util_port  # no public API says it

    return bool(_pywrap_util_port.IsMklEnabled())


def onednn_words() -> str:
    """'on' / 'off', and how: the variable's value, or TensorFlow's choice for this CPU."""
    setting = os.environ.get("TF_ENABLE_ONEDNN_OPTS")
    how = f"TF_ENABLE_ONEDNN_OPTS={setting}" if setting is not None else "TensorFlow's default for this CPU"
    return f"{'on' if onednn_enabled() else 'off'} ({how})"
