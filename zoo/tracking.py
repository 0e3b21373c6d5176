"""Tracking: one tag vocabulary for both frameworks, TensorBoard by default, MLflow on request.

``metrics.csv`` is the run's own record; the trackers get the very same per-epoch row, so a
TensorBoard curve or an MLflow metric is never a second computation of what the CSV says.
The tags are zoo's, not Lightning's (``train_loss``, ``epoch``...) nor Keras'
(``epoch_loss`` under ``train/`` and ``validation/``): a Lightning run and a Keras run of one
recipe land on the same TensorBoard cards, step for step (the x axis is the optimizer step in
both).

Per epoch, at the optimizer step the epoch ended on::

    train/loss  train/<metric>  val/loss  val/<metric>  optim/lr  perf/epoch_seconds
    perf/samples_per_second  epoch

Per step, every ``tracking.log_every_n_steps`` optimizer steps (each read is a device sync)::

    train/loss_step  optim/lr_step  optim/grad_norm_step  perf/samples_per_second_step

``loss_step`` is the mean loss of the step's batches (all of them, under gradient
accumulation); ``grad_norm_step`` is the global L2 norm of the gradients the optimizer
receives, before any clipping (torch's ``clip_grad_norm_`` norm). MLflow gets the per-epoch
tags, the test metrics as ``test/<name>``, the resolved recipe as params and the checkpoint.

Nothing here imports torch, TensorFlow or MLflow; MLflow is imported only when a recipe
turns it on.
"""

from __future__ import annotations

import json
import logging
import time
from collections import defaultdict
from pathlib import Path
from typing import Any, Protocol

from zoo.hardware import SetupError, require_extra
from zoo.limits import read_json
from zoo.metrics_file import read_metrics

log = logging.getLogger("zoo")

TB_FOLDER = "tb"
MLFLOW_RECORD = ".mlflow.json"  # which MLflow run a run folder logs to, so resume continues it
STEP_TAGS = ("train/loss_step", "optim/lr_step", "optim/grad_norm_step", "perf/samples_per_second_step")


def column_tag(column: str) -> str | None:
    """The tag of a ``metrics.csv`` column (None for the row's position columns)."""
    if column in ("epoch", "step"):
        return None
    if column == "lr":
        return "optim/lr"
    if column == "epoch_seconds":
        return "perf/epoch_seconds"
    stage, _, name = column.partition("_")
    return f"{stage}/{name}"


def epoch_scalars(row: dict[str, Any], samples: int | None) -> dict[str, float]:
    """The per-epoch tags of one ``metrics.csv`` row (``samples``: training samples the epoch saw)."""
    scalars = {
        tag: float(value)
        for column, value in row.items()
        if (tag := column_tag(column)) is not None and value is not None and value != ""
    }
    seconds = scalars.get("perf/epoch_seconds")
    if samples and seconds:
        scalars["perf/samples_per_second"] = samples / seconds
    if row.get("epoch") not in (None, ""):
        scalars["epoch"] = float(row["epoch"])
    return scalars


def step_scalars(loss: float, lr: float, grad_norm: float | None, samples_per_second: float | None):
    """The per-step tags; a value a framework could not give this step is left out, not faked."""
    values = dict(zip(STEP_TAGS, (loss, lr, grad_norm, samples_per_second), strict=True))
    return {tag: float(v) for tag, v in values.items() if v is not None}


class ScalarWriter(Protocol):
    """A framework's TensorBoard writer: Lightning's TensorBoardLogger or ``tf.summary``."""

    def write(self, scalars: dict[str, float], step: int) -> None: ...

    def flush(self) -> None: ...


class Tracker:
    """What both frameworks' callbacks feed: one row per epoch, a few values every N steps."""

    def __init__(
        self,
        writer: ScalarWriter | None,
        mlflow: MlflowRun | None,
        every_n_steps: int,
        samples_per_epoch: int,
    ):
        self.writer, self.mlflow = writer, mlflow
        self.every_n_steps, self.samples_per_epoch = every_n_steps, samples_per_epoch

    def wants_step(self, step: int) -> bool:
        """Whether optimizer step ``step`` (counted from 1) is one the per-step tags are written at."""
        return self.writer is not None and step % self.every_n_steps == 0

    def step(self, step: int, scalars: dict[str, float]) -> None:
        if self.writer is not None:
            self.writer.write(scalars, step)

    def epoch(self, row: dict[str, Any]) -> None:
        scalars = epoch_scalars(row, self.samples_per_epoch)
        step = int(row["step"])
        if self.writer is not None:
            self.writer.write(scalars, step)
            self.writer.flush()  # an epoch's curves are on disk when the epoch is
        if self.mlflow is not None:
            self.mlflow.log(scalars, step)

    def flush(self) -> None:
        if self.writer is not None:
            self.writer.flush()


def open_tracker(recipe, run_dir: Path | None, samples_per_epoch: int, writer_factory) -> Tracker | None:
    """The run's tracker (None where nothing tracks: no run folder, or tracking all off).

    ``writer_factory(folder)`` opens the framework's TensorBoard writer on ``run/tb``. MLflow
    starts here, before the first step, so a wrong tracking URI fails the run at once rather
    than after an hour of training.
    """
    if run_dir is None:
        return None
    cfg = recipe.tracking
    writer = writer_factory(run_dir / TB_FOLDER) if cfg.tensorboard else None
    mlflow = MlflowRun.start(run_dir, recipe) if cfg.mlflow.enabled else None
    if writer is None and mlflow is None:
        return None
    return Tracker(writer, mlflow, cfg.log_every_n_steps, samples_per_epoch)


# --------------------------------------------------------------------------- MLflow


def _mlflow():
    require_extra(
        "mlflow", ("mlflow", "sqlalchemy", "alembic"), "tracking.mlflow", "or set tracking.mlflow false"
    )
    import mlflow

    for name in ("mlflow", "alembic"):  # table creation and migrations say a lot at INFO
        logging.getLogger(name).setLevel(logging.WARNING)
    return mlflow


def default_tracking_uri(export_dir: Path) -> str:
    return f"sqlite:///{Path(export_dir).resolve() / 'mlflow.db'}"


def flat_params(node: Any, prefix: str = "") -> dict[str, str]:
    """A nested recipe as MLflow params: ``trainer.max_epochs`` -> ``"30"``."""
    if isinstance(node, dict):
        return {k: v for key, value in node.items() for k, v in flat_params(value, f"{prefix}{key}.").items()}
    text = node if isinstance(node, str) else json.dumps(node)
    return {prefix.rstrip("."): text[:6000]}  # MLflow's limit on a param's value


class MlflowRun:
    """The MLflow run of one zoo run folder, through ``MlflowClient`` (no process-wide active
    run: a notebook's own MLflow run is left alone). Its id is kept in the run folder, so a
    resumed run logs on into the same MLflow run, and the run's end (``summary.json``,
    :func:`finish_mlflow`) closes it with the test metrics and the checkpoint."""

    def __init__(self, client, run_id: str):
        self.client, self.run_id = client, run_id

    @classmethod
    def start(cls, run_dir: Path, recipe) -> MlflowRun:
        mlflow = _mlflow()
        cfg = recipe.tracking.mlflow
        uri = cfg.tracking_uri or default_tracking_uri(recipe.export.dir)
        record = run_dir / MLFLOW_RECORD
        try:
            client = mlflow.MlflowClient(tracking_uri=uri)
            if record.is_file():  # a resumed run continues its MLflow run
                run_id = _recorded_run_id(record)
                client.update_run(run_id, status="RUNNING")
                return cls(client, run_id)
            name = cfg.experiment or recipe.name
            experiment = client.get_experiment_by_name(name)
            if experiment is not None:
                experiment_id = experiment.experiment_id
            else:
                # The default store keeps its artifacts beside it, not in the working directory.
                artifacts = None if cfg.tracking_uri else (Path(recipe.export.dir).resolve() / "mlartifacts")
                experiment_id = client.create_experiment(
                    name, artifact_location=artifacts.as_uri() if artifacts else None
                )
            tags = {
                "zoo.run_dir": str(run_dir.resolve()), "zoo.framework": recipe.trainer.framework,
                "zoo.architecture": recipe.model.preset or recipe.model.architecture,
            }  # fmt: skip
            run = client.create_run(experiment_id, run_name=run_dir.name, tags=tags)
            params = [mlflow.entities.Param(k, v) for k, v in flat_params(recipe.to_dict()).items()]
            for first in range(0, len(params), 100):  # MLflow takes at most 100 params a call
                client.log_batch(run.info.run_id, params=params[first : first + 100])
        except mlflow.exceptions.MlflowException as error:
            raise SetupError(f"tracking.mlflow: MLflow at {uri} refused the run: {error}") from None
        record.write_text(json.dumps({"tracking_uri": uri, "run_id": run.info.run_id}) + "\n")
        return cls(client, run.info.run_id)

    def log(self, scalars: dict[str, float], step: int) -> None:
        from mlflow.entities import Metric

        now = _milliseconds()
        metrics = [Metric(tag, value, now, step) for tag, value in scalars.items()]
        self.client.log_batch(self.run_id, metrics=metrics)


def _recorded_run_id(record: Path) -> str:
    fix = "it records which MLflow run the folder logs to: delete it to log the rest to a new one"
    run_id = read_json(record, error=SetupError, fix=fix).get("run_id")
    if not isinstance(run_id, str):
        raise SetupError(f"{record} has no run_id text; {fix}")
    return run_id


def _milliseconds() -> int:
    return int(time.time() * 1000)


def finish_mlflow(run_dir: Path, summary: dict[str, Any]) -> None:
    """Close the MLflow run of a run folder that has one: the test metrics, the checkpoint,
    recipe and metrics as artifacts, and FINISHED (or FAILED for a diverged run). MLflow
    being unreachable now costs the MLflow record, never the run: said, not raised."""
    record = run_dir / MLFLOW_RECORD
    if not record.is_file():
        return
    try:
        found = json.loads(record.read_text())
        mlflow = _mlflow()
        client = mlflow.MlflowClient(tracking_uri=found["tracking_uri"])
        run_id = found["run_id"]
        status = summary.get("status", "finished")
        if status == "finished":
            from mlflow.entities import Metric

            step = _last_step(run_dir)
            metrics = summary.get("metrics", {})
            logged = [
                Metric(column_tag(k) or k, float(v), _milliseconds(), step)
                for k, v in metrics.items()
                if k.startswith("test_") and isinstance(v, int | float)
            ]
            if "train_seconds" in metrics:
                seconds = float(metrics["train_seconds"])
                logged.append(Metric("perf/train_seconds", seconds, _milliseconds(), step))
            client.log_batch(run_id, metrics=logged)
            for name in ("model.safetensors", "tokenizer.json", "recipe.yaml", "metrics.csv"):
                if (run_dir / name).is_file():
                    client.log_artifact(run_id, str(run_dir / name))
        client.set_tag(run_id, "zoo.status", status)
        client.set_terminated(run_id, status=MLFLOW_STATUS.get(status, "FAILED"))
    except Exception as error:  # a tracking server's failure must not fail a finished run
        log.error(f"MLflow: could not close the run of {run_dir} ({type(error).__name__}: {error})")


MLFLOW_STATUS = {"finished": "FINISHED", "interrupted": "KILLED", "diverged": "FAILED"}


def _last_step(run_dir: Path) -> int:
    try:
        rows = read_metrics(run_dir / "metrics.csv")
        return int(rows[-1]["step"]) if rows else 0
    except (OSError, ValueError, KeyError):
        return 0


# --------------------------------------------------------------------------- reading


def read_tensorboard(folder: Path) -> dict[str, list[tuple[int, float]]]:
    """Every scalar of a run's event files, by tag: ``[(step, value), ...]`` in file order.
    Read with TensorBoard's own reader, as TensorBoard would show them."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    found: dict[str, list[tuple[int, float]]] = defaultdict(list)
    for events in sorted(Path(folder).glob("events.out.tfevents.*")):
        reader = EventAccumulator(str(events), size_guidance={"scalars": 0, "tensors": 0})
        reader.Reload()
        tags = reader.Tags()
        for tag in tags.get("scalars", []):
            found[tag] += [(e.step, float(e.value)) for e in reader.Scalars(tag)]
        for tag in tags.get("tensors", []):  # tf.summary writes scalars as tensors
            for event in reader.Tensors(tag):
                from tensorboard.util import tensor_util

                found[tag].append((event.step, float(tensor_util.make_ndarray(event.tensor_proto))))
    return dict(found)
