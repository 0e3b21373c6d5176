"""Cross-framework parity and speed: a recipe's PyTorch and Keras twins side by side.

Same initial weights, same batches, same optimizer semantics and learning rates; the
report says how far outputs, gradients, losses and final weights are apart (PASS or
DIFFERS per section, with the tensor or step where parity broke), and how fast and how
memory-hungry each framework is on the recipe. Importing this package imports neither
framework; :func:`compare` does.

Modules: ``twins`` (what both sides share), ``steps`` (one plain training step each),
``parity`` (the sections), ``speed``, ``tolerances``, ``results``, ``report``, ``runner``.
"""

from zoo.compare.runner import Comparison, compare

__all__ = ["Comparison", "compare"]
