"""PEFT's ``adapter_config.json``, read by a pydantic model: each problem one line naming the
field, and what zoo does not compute (DoRA, other tuners, layer replication...) refused by name.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, ValidationError, field_validator

from zoo.checkpoint.file import CheckpointError
from zoo.limits import read_json

# Options of PEFT's LoraConfig that change what a file computes in ways zoo does not: refused by
# name where set (None, False, {} and [] are their "off").
UNSUPPORTED = {
    "use_dora": "DoRA (weight-decomposed LoRA)",
    "use_qalora": "QALoRA",
    "use_bdlora": "block-diagonal LoRA",
    "layer_replication": "layer replication",
    "megatron_config": "Megatron-parallel layers",
    "trainable_token_indices": "trainable tokens",
    "target_parameters": "LoRA on parameters (target_parameters)",
    "alora_invocation_tokens": "activated LoRA (aLoRA)",
    "arrow_config": "Arrow routing",
    "monteclora_config": "MonteCLoRA",
    "velora_config": "VeLoRA",
    "kasa_config": "KaSA",
}
# init_lora_weights that rewrite the base's weights as they make the adapter (the adapter only
# works on that rewritten base, which the file does not hold).
BASE_CHANGING_INITS = ("pissa", "olora", "corda", "loftq", "lora_ga")
Rank = Annotated[StrictInt, Field(gt=0)]
Alpha = Annotated[float, Field(allow_inf_nan=False)]


class PeftSettings(BaseModel):
    """The fields of PEFT's ``adapter_config.json`` zoo reads (others are kept, unread)."""

    model_config = ConfigDict(extra="allow")

    peft_type: str = "LORA"
    r: Rank
    lora_alpha: Alpha
    lora_dropout: float = Field(0.0, ge=0.0, lt=1.0)
    target_modules: list[str] | str | None = None
    modules_to_save: list[str] | None = None
    bias: Literal["none", "all", "lora_only"] = "none"
    use_rslora: StrictBool = False
    lora_bias: StrictBool = False
    fan_in_fan_out: StrictBool = False
    rank_pattern: dict[str, Rank] = Field(default_factory=dict)
    alpha_pattern: dict[str, Alpha] = Field(default_factory=dict)
    init_lora_weights: bool | str = True

    @field_validator("lora_dropout", "rank_pattern", "alpha_pattern", mode="before")
    @classmethod
    def _null_is_default(cls, value, info):
        """Older PEFT versions write null for an unset dropout or pattern."""
        if value is None:
            return 0.0 if info.field_name == "lora_dropout" else {}
        return value


def read_settings(path: Path) -> PeftSettings:
    """``adapter_config.json``, checked: one line naming the first field that is wrong."""
    fix = "it should be the adapter_config.json PEFT's save_pretrained wrote"
    raw = read_json(path, error=CheckpointError, fix=fix)
    try:
        settings = PeftSettings.model_validate(raw)
    except ValidationError as error:
        raise CheckpointError(f"{path}: {_first_problem(error)}; {fix}") from None
    for name, value in [*settings.rank_pattern.items(), *settings.alpha_pattern.items()]:
        if (
            isinstance(value, bool)
            or not math.isfinite(value)
            or (name in settings.rank_pattern and value < 1)
        ):
            raise CheckpointError(f"{path}: the pattern entry {name!r} is {value!r}; {fix}")
    if settings.peft_type != "LORA":
        raise CheckpointError(f"{path}: is a {settings.peft_type} adapter; zoo imports LoRA (peft_type LORA)")
    if settings.bias != "none":
        raise CheckpointError(
            f"{path}: bias is {settings.bias!r} (PEFT trains the base's biases); zoo imports bias 'none' "
            "(lora_bias, B's own bias, is supported)"
        )
    for name, what in UNSUPPORTED.items():
        if getattr(settings, name, None) not in (None, False, {}, []):
            raise CheckpointError(f"{path}: uses {what} ({name}); zoo imports plain LoRA adapters only")
    init = settings.init_lora_weights
    if isinstance(init, str) and init.lower().startswith(BASE_CHANGING_INITS):
        raise CheckpointError(
            f"{path}: init_lora_weights {init!r} rewrote the base's weights when the adapter was made; "
            "zoo imports adapters of an unchanged base (convert it to plain LoRA with PEFT first)"
        )
    return settings


def _first_problem(error: ValidationError) -> str:
    problem = error.errors()[0]
    field = ".".join(str(part) for part in problem["loc"]) or "the file"
    if problem["type"] == "missing":
        return f"{field} is missing"
    shown = repr(problem.get("input"))
    shown = shown if len(shown) <= 40 else shown[:37] + "..."
    return f"{field} is {shown}: {problem['msg'][:1].lower()}{problem['msg'][1:]}"
