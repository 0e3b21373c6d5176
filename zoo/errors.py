"""Error types raised at the bottom of zoo and caught far above it.

A low module (the family contract, the tokenizer, zoo.nn's input checks) raises these while the
command line and the API catch them; defining them here, below everything, lets the raiser
import its error without importing the package that catches it (docs/layout.md). Each package
still offers its own: ``zoo.data.DataError`` is this one.
"""

from __future__ import annotations


class DataError(ValueError):
    """User data that cannot be used, with what was expected instead."""
