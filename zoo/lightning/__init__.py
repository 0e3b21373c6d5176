"""The PyTorch / Lightning side of zoo: tasks and a Trainer built from a recipe.

Importing this package does not import torch; its modules do.
"""
