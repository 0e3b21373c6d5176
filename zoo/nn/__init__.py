"""Building blocks written once per framework and shared by every family.

``zoo.nn.torch`` holds the torch modules, ``zoo.nn.keras`` their Keras twins, and
:mod:`zoo.nn.ports` the pure-numpy weight ports between them. This package itself and
``ports``/``errors`` import neither framework: the core can name them without paying for
torch or TensorFlow.

What lives here is what would otherwise be written twice and drift apart: self-attention
(written out rather than taken from ``nn.MultiheadAttention`` / ``keras.layers.MultiHeadAttention``,
so both twins compute and round at the same places), a token embedding that refuses ids
outside the vocabulary, and a BatchNorm that refuses a batch with one value per channel,
each with the same message in both frameworks (:mod:`zoo.nn.errors`).

Recurrent nets the same way: :mod:`zoo.nn.recurrent_config` (the fields every recurrent
family shares), :mod:`zoo.nn.recurrent_ports` (the LSTM/GRU/Elman gate and bias layouts
between the frameworks), ``zoo.nn.torch.recurrent`` / ``zoo.nn.keras.recurrent`` (the net:
embedding, recurrent stack, pooling, head) and ``zoo.nn.keras.recurrent_cells`` (Keras cells
with torch's two biases). A recurrent family supplies its layers and its config's own fields.
"""
