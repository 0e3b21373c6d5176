"""Cross-framework parity and speed: a recipe's PyTorch and Keras twins side by side.

Same initial weights, same batches, same optimizer semantics and learning rates; the
report says how far outputs, gradients, losses and final weights are apart (PASS or
DIFFERS per section, with the tensor or step where parity broke), and how fast and how
memory-hungry each framework is on the recipe. Importing this package imports neither
framework; :func:`compare` does.

Every bound is measured: each framework's own rounding (its distance from its own run in
a reference precision, float64 for float32 runs and float32 for bf16/fp16) plus a fixed
allowance for the reference twins, no figure keyed by model family. Training is chaotic,
so a loss gap over its bound is decided by re-synchronising: one step of both twins from
the torch twin's state along the run says amplified rounding or a different computation.

Both twins train through zoo's own trainers (the Lightning task in Lightning's Trainer, the
Keras model compiled as ``zoo train`` compiles it), so a bug in the real training path
shows in the report.

Modules: ``twins`` (what both sides share), ``steps`` (each trainer's step, and the batches
both pipelines yield),
``parity`` (the sections), ``resync`` (one checked step from a shared state), ``speed``,
``tolerances``, ``results``, ``report``, ``runner``.
"""

import sys
import types

from zoo.compare.runner import Comparison, compare

__all__ = ["Comparison", "compare"]


class _CallablePackage(types.ModuleType):
    """``zoo.compare(...)`` is the API's verb, but importing this package (``zoo.compare.runner``,
    say) makes ``zoo.compare`` the package: calling the package calls the verb."""

    def __call__(self, *args, **kwargs):
        return compare(*args, **kwargs)


sys.modules[__name__].__class__ = _CallablePackage
