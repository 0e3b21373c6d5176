"""click's number types, as zoo's options need them."""

from __future__ import annotations

import math
from typing import Any

import click


class FiniteFloatRange(click.FloatRange):
    """click's ``FloatRange``, without the ``nan`` and ``inf`` that its bounds let through
    (``nan`` compares false with every bound): neither is a setting."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> float:
        number = super().convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number.", param, ctx)
        return number
