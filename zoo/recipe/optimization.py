"""The ``optimizer`` and ``schedule`` sections: what each framework's optimizer and learning
rate schedule is built from (``zoo.lightning.optim``, ``zoo.keras.optimizers``,
``zoo.schedule``). One table of names for both frameworks: a recipe means the same
update in each.
"""

from __future__ import annotations

from typing import Annotated, Literal, Union

from pydantic import Field, PositiveInt, model_validator

from zoo.recipe.data import Section, default_tag

# Rates, epsilons and decays are finite numbers: an infinite or NaN one only shows up later
# as a non-finite loss. (The loader refuses non-finite numbers in every section; these keep
# a Recipe built in Python to the same rule.)
PositiveFloat = Annotated[float, Field(gt=0, allow_inf_nan=False)]
Fraction = Annotated[float, Field(ge=0, lt=1, allow_inf_nan=False)]


# ------------------------------------------------------------------------- optimizer


class OptimizerBase(Section):
    decay_biases_and_norms: bool = Field(
        True,
        description="Whether weight decay also acts on 1-D tensors (biases, norm scales and shifts); "
        "false exempts them, as BERT and timm fine-tune. The same tensors in both frameworks.",
    )


class SGD(OptimizerBase):
    """Stochastic gradient descent with torch's momentum and L2 weight-decay semantics."""

    name: Literal["sgd"] = "sgd"
    lr: PositiveFloat = Field(0.1, description="Peak learning rate.")
    momentum: float = Field(0.0, ge=0, lt=1, allow_inf_nan=False)
    nesterov: bool = False
    weight_decay: float = Field(
        0.0, ge=0, allow_inf_nan=False, description="L2 penalty added to the gradient (as torch.optim.SGD)."
    )

    @model_validator(mode="after")
    def _nesterov(self):
        if self.nesterov and self.momentum == 0:
            raise ValueError("optimizer.nesterov needs optimizer.momentum > 0")
        return self


class Adam(OptimizerBase):
    """Adam exactly as torch.optim.Adam: epsilon added to sqrt(v_hat), L2 weight decay."""

    name: Literal["adam"] = "adam"
    lr: PositiveFloat = Field(1e-3, description="Peak learning rate.")
    betas: tuple[Fraction, Fraction] = (
        0.9,
        0.999,
    )
    eps: PositiveFloat = Field(
        1e-8, description="Added to sqrt(v_hat) (torch's convention, in both frameworks)."
    )
    weight_decay: float = Field(
        0.0, ge=0, allow_inf_nan=False, description="L2 penalty added to the gradient (as torch.optim.Adam)."
    )


class AdamW(Adam):
    """AdamW: decoupled weight decay (as torch.optim.AdamW and keras.optimizers.AdamW)."""

    name: Literal["adamw"] = "adamw"  # type: ignore[assignment]
    weight_decay: float = Field(0.01, ge=0, allow_inf_nan=False, description="Decoupled weight decay.")


OptimizerConfig = Annotated[
    Union[SGD, Adam, AdamW], Field(discriminator="name"), default_tag("adam")  # noqa: UP007
]


# -------------------------------------------------------------------------- schedule


class ScheduleBase(Section):
    warmup_steps: int = Field(
        0, ge=0, description="Linear warmup from 0 to the peak rate over this many steps."
    )


class Constant(ScheduleBase):
    name: Literal["constant"] = "constant"


class Cosine(ScheduleBase):
    """Cosine decay from the peak rate to ``min_lr_ratio`` x peak at the last step."""

    name: Literal["cosine"] = "cosine"
    min_lr_ratio: float = Field(0.0, ge=0, le=1, allow_inf_nan=False)


class Step(ScheduleBase):
    """Multiply the rate by ``gamma`` every ``step_epochs`` epochs."""

    name: Literal["step"] = "step"
    step_epochs: PositiveInt = 10
    gamma: float = Field(0.1, gt=0, le=1, allow_inf_nan=False)


ScheduleConfig = Annotated[
    Union[Constant, Cosine, Step], Field(discriminator="name"), default_tag("constant")  # noqa: UP007
]
