"""The train half of zoo's Keras 3 / TensorFlow side: fit built from a recipe (tf.data, losses,
metrics, optimizers, callbacks, the step kit and the backend adapter). What builds or runs a
model (layers with torch semantics, remat, dtype policies, the skeleton build) is
:mod:`zoo.nn.keras`, the build half.

Importing this package does not import TensorFlow; its modules do.
"""
