"""``zoo import`` and ``zoo export``: foreign weight files in and out of zoo checkpoints.

The layouts themselves belong to the families (``Family.formats``, see :mod:`zoo.checkpoint.foreign`);
this package reads and writes the files around them, a module per job:

- :mod:`zoo.interchange.foreign_files`: foreign weight files read. Reading never unpickles
  arbitrary objects: ``.pth``/``.pt``/``.bin`` go through ``torch.load(weights_only=True)``.
  Nothing is downloaded.
- :mod:`zoo.interchange.compressed_tensors`: transformers folders compressed-tensors quantized
  int8 / int4, read as zoo's quantized checkpoints keeping their integers; other quantizations
  refused by name.
- :mod:`zoo.interchange.tokenizer_io`: a foreign folder's tokenizer in, a tokenizer saved beside
  a checkpoint.
- :mod:`zoo.interchange.inputs`: every file a command reads, which none of its outputs may replace.
- :mod:`zoo.interchange.importing`: ``zoo import``, foreign weights -> a zoo checkpoint.
- :mod:`zoo.interchange.exporting`: ``zoo export``, a zoo checkpoint -> a foreign layout. Every
  export is read back through its format and compared bit for bit with what was written, so a
  file that would not load where it is going is never left behind.
- :mod:`zoo.interchange.adapters`: ``zoo merge``, and LoRA adapters in and out of PEFT's files.

Only the error they all raise is defined here.
"""

from __future__ import annotations

from zoo.checkpoint.file import CheckpointError


class InterchangeError(CheckpointError):
    """A foreign file that cannot be imported or a checkpoint that cannot be exported as asked."""
