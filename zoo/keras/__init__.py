"""The Keras 3 / TensorFlow side of zoo: layers with torch semantics, and fit built from a recipe.

Importing this package does not import TensorFlow; its modules do.
"""
