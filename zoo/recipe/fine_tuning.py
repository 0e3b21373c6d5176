"""The recipe's ``init`` section: where a run's weights start. A checkpoint of either framework
(``init.from``) with what of it trains (the head alone, its own learning rate, a new head), or
low-rank adapters (``init.lora``) on a frozen base."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, PositiveInt, model_validator

from zoo.recipe.data import Section
from zoo.recipe.optimization import PositiveFloat


class LoraConfig(Section):
    """Low-rank adapters (LoRA, as PEFT builds them) on the named projections; the base stays frozen.

    Each targeted matrix W (out x in) gets A (rank x in, Kaiming-uniform as PEFT draws it) and B
    (out x rank, zero): the layer computes W x + scale * B A dropout(x), scale alpha / rank (or
    alpha / sqrt(rank) with use_rslora). Only A, B (and the biases ``train_bias`` names) train.
    """

    rank: PositiveInt = Field(8, le=4096, description="The adapters' rank r.")
    alpha: PositiveFloat = Field(16.0, description="Scaling numerator: scale = alpha / rank.")
    dropout: float = Field(0.0, ge=0.0, lt=1.0, description="Dropout on the adapters' input (PEFT's).")
    target: list[str] | None = Field(
        None,
        min_length=1,
        description="Projections to adapt, by weight-table name or its ending (q_proj, attn.q, "
        "mlp.fc1); default the family's (its attention projections). A fused q/k/v projection "
        "takes q, k, v separately.",
    )
    train_bias: Literal["none", "lora_only", "all"] = Field(
        "none",
        description="Biases that train with the adapters: none, those of the adapted projections "
        "(lora_only), or every bias (all), as PEFT's bias option.",
    )
    use_rslora: bool = Field(False, description="Scale by alpha / sqrt(rank) (rank-stabilised LoRA).")

    def scale(self, rank: int | None = None) -> float:
        rank = rank or self.rank
        return self.alpha / (rank**0.5 if self.use_rslora else rank)


class InitConfig(Section):
    from_: Path | None = Field(
        None, alias="from", description="A common checkpoint (from either framework) to start from."
    )
    freeze_backbone: bool = Field(
        False, description="Train only the head (the tensors whose shape follows the data)."
    )
    head_lr: PositiveFloat | None = Field(None, description="The head's own learning rate.")
    reset_head: bool = Field(
        False, description="Re-initialise the head even where its shape fits (a new task, as many classes)."
    )
    lora: LoraConfig | None = Field(
        None,
        description="Train low-rank adapters on a frozen base (init.from, or the seed's init) instead "
        "of every weight; the run saves the adapter alone.",
    )

    @model_validator(mode="after")
    def _source(self):
        if self.from_ is None and (self.freeze_backbone or self.head_lr is not None or self.reset_head):
            raise ValueError(
                "init.freeze_backbone, init.head_lr and init.reset_head need init.from "
                "(a checkpoint to start from)"
            )
        if self.lora is not None and (self.freeze_backbone or self.head_lr is not None or self.reset_head):
            raise ValueError(
                "init.lora trains adapters on a frozen base; it does not combine with "
                "init.freeze_backbone, init.head_lr or init.reset_head"
            )
        if self.from_ is not None and not self.from_.is_file():
            raise ValueError(f"init.from {str(self.from_)!r} is not a file; give a .safetensors checkpoint")
        return self
