"""The recipe's ``tracking`` section: where a run's curves go besides ``metrics.csv``
(TensorBoard by default, MLflow on request); zoo.tracking writes them."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BeforeValidator, Field, PositiveInt

from zoo.recipe.data import Section


def _mlflow_switch(value: Any) -> Any:
    """``mlflow: true`` is short for ``mlflow: {enabled: true}``."""
    return {"enabled": value} if isinstance(value, bool) else value


class MlflowConfig(Section):
    """An MLflow run per training run: the resolved recipe as params, the per-epoch metrics, the
    test metrics and the exported checkpoint as an artifact. Needs ``pip install 'zoo[mlflow]'``."""

    enabled: bool = Field(False, description="Log the run to MLflow too (off by default).")
    tracking_uri: str | None = Field(
        None,
        description="Any MLflow tracking URI (sqlite:///..., http://..., databricks); default "
        "sqlite:///<export.dir>/mlflow.db, with artifacts under <export.dir>/mlartifacts.",
    )
    experiment: str | None = Field(None, description="MLflow experiment name; default the recipe's name.")


class TrackingConfig(Section):
    """Where a run's curves go besides ``metrics.csv`` (which is always written)."""

    tensorboard: bool = Field(
        True,
        description="TensorBoard event files under <run folder>/tb, one tag vocabulary in both frameworks.",
    )
    log_every_n_steps: PositiveInt = Field(
        50,
        description="Per-step scalars (loss, learning rate, gradient norm, samples/s) every N optimizer "
        "steps; each costs a device sync, so a small model's step notices a low N.",
    )
    mlflow: Annotated[MlflowConfig, BeforeValidator(_mlflow_switch)] = Field(default_factory=MlflowConfig)
