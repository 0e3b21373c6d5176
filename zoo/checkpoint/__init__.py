"""The common checkpoint, a module per job; this package itself re-exports nothing.

- :mod:`zoo.checkpoint.file`: the safetensors bytes and their durable I/O (aligned reads,
  atomic writes, pickle refusal, the non-finite check) and ``CheckpointError``;
  :mod:`zoo.checkpoint.aligned` the aligned buffers they read into and write from.
- :mod:`zoo.checkpoint.metadata`: what a checkpoint means: ``Checkpoint``, its metadata,
  ``write_checkpoint`` and ``read_checkpoint``'s validation.
- :mod:`zoo.checkpoint.tables`: weight tables (``Port`` and the layout blocks) between the
  torch ``state_dict`` and the Keras variables.
- :mod:`zoo.checkpoint.tensors`: a built twin's canonical tensors in and out (``load_tensors``,
  ``model_tensors``, the fast ``load_torch``/``load_keras``).
- :mod:`zoo.checkpoint.state`: training-state files of a run folder (names, CRC-32, commit).
- :mod:`zoo.checkpoint.foreign`: foreign layouts a family reads and writes (``ForeignFormat``).

Importing the package imports none of them, so a module that needs one job (``state``,
``foreign``) does not load the others; nothing here starts torch or TensorFlow.
"""
