"""Run folders: where a training run writes its recipe, metrics, checkpoint and summary."""

from __future__ import annotations

import csv
import json
import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from zoo.hardware import SetupError

log = logging.getLogger("zoo")


def is_primary_process() -> bool:
    """Whether this process writes the run's files: rank 0 of Lightning/torchrun/SLURM or
    the chief of a TF_CONFIG cluster (every data-parallel process runs the same code)."""
    env = os.environ
    for name in ("RANK", "LOCAL_RANK", "NODE_RANK", "SLURM_PROCID"):
        if env.get(name, "0") != "0":
            return False
    if "TF_CONFIG" in env:
        task = json.loads(env["TF_CONFIG"]).get("task", {})
        return task.get("index", 0) == 0 and task.get("type", "worker") in ("worker", "chief")
    return True


RANK_VARIABLES = (
    "RANK",
    "LOCAL_RANK",
    "NODE_RANK",
    "GROUP_RANK",
    "SLURM_PROCID",
    "SLURM_LOCALID",
    "SLURM_NODEID",
)
LAUNCH_VARIABLES = (
    *RANK_VARIABLES, "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID",
    "SLURM_NTASKS", "SLURM_STEP_NUM_TASKS", "TF_CONFIG",
)  # fmt: skip
TORCHRUN_NEEDS = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


def _launch_world(env: dict[str, str]) -> tuple[int, int]:
    """(this process's rank, processes in the job) as a launcher's variables say; (0, 1) alone.
    A SLURM batch script has SLURM_NTASKS of the allocation but runs once: only a job step
    (``srun``, SLURM_STEP_NUM_TASKS) starts several processes."""
    ranks = [env[v] for v in RANK_VARIABLES if v in env]
    worlds = [env[v] for v in ("WORLD_SIZE", "SLURM_STEP_NUM_TASKS") if v in env]
    if "TF_CONFIG" in env:
        try:
            tf_config = json.loads(env["TF_CONFIG"])
            ranks.append(str(tf_config.get("task", {}).get("index", 0)))
            worlds.append(str(sum(len(v) for v in tf_config.get("cluster", {}).values())))
        except (ValueError, AttributeError, TypeError):
            raise SetupError(
                f"TF_CONFIG is not the JSON TensorFlow reads: {env['TF_CONFIG'][:80]!r}"
            ) from None
    numbers = [int(v) if v.strip().isdigit() else -1 for v in (*ranks, *worlds)]
    if min(numbers, default=0) < 0:
        raise SetupError(
            "launcher variables that are not whole numbers: "
            + ", ".join(f"{k}={env[k]!r}" for k in (*RANK_VARIABLES, "WORLD_SIZE") if k in env)
        )
    return max(numbers[: len(ranks)], default=0), max(numbers[len(ranks) :], default=1)


def check_launch(trainer_cfg) -> None:
    """Square the recipe's process layout with what a scheduler put in the environment, before
    any run folder exists, and say what zoo does about it.

    A one-process recipe among several launched processes would train one copy per process
    (or, as rank > 0, train nothing and exit 0): refused, naming the variables. Launcher
    variables that describe a single process (a shell inside a scheduler's job) are ignored,
    said once, and removed for this process, so Lightning and TensorFlow do not act on them.
    A multi-node recipe without its launcher's variables, or with only some, is refused with
    what is missing instead of waiting for peers that never come.
    """
    env = os.environ
    found = {k: env[k] for k in LAUNCH_VARIABLES if k in env}
    rank, world = _launch_world(dict(env))
    keras = trainer_cfg.framework == "keras"
    processes = trainer_cfg.num_nodes if keras else trainer_cfg.world_size
    layout = f"trainer.devices {trainer_cfg.devices} x trainer.num_nodes {trainer_cfg.num_nodes}"
    shown = ", ".join(f"{k}={v[:60]}" for k, v in found.items())
    if processes == 1:
        if rank > 0 or world > 1:
            raise SetupError(
                f"the environment makes this process {rank} of a {world}-process job ({shown}), but the "
                f"recipe trains in one process ({layout}), so every process would train its own copy. "
                "Start zoo train once, outside torchrun/srun/TF_CONFIG, or set trainer.devices and "
                "trainer.num_nodes to the job's layout"
            )
        if found:
            log.warning(f"ignoring {shown}: the recipe trains in one process ({layout})")
            for name in found:
                del env[name]
        return
    if keras:
        if "TF_CONFIG" not in env:
            raise SetupError(
                f"trainer.num_nodes {trainer_cfg.num_nodes} with Keras needs TF_CONFIG on every worker "
                '(\'{"cluster": {"worker": [host:port, ...]}, "task": {"type": "worker", "index": i}}\'); '
                "it is not set here"
            )
    elif trainer_cfg.num_nodes > 1:  # one node: Lightning starts (and describes) its own processes
        slurm = "SLURM_PROCID" in env and "SLURM_STEP_NUM_TASKS" in env
        missing = [v for v in TORCHRUN_NEEDS if v not in env]
        if missing and not slurm:
            raise SetupError(
                f"trainer.num_nodes {trainer_cfg.num_nodes} needs a launcher on every node (torchrun "
                f"--nnodes {trainer_cfg.num_nodes} --nproc-per-node {trainer_cfg.devices}, or srun); "
                f"{', '.join(missing)} {'is' if len(missing) == 1 else 'are'} not set here"
                + (f" (found {shown})" if found else "")
            )
    if world > 1 and world != processes:
        raise SetupError(
            f"the launcher started {world} processes ({shown}), but the recipe's {layout} makes "
            f"{processes}; make them agree"
        )


TASK_METRICS = {
    "classification": ("accuracy",),
    "language_modeling": ("bpc",),
    "token_classification": ("accuracy",),
    "masked_language_modeling": ("accuracy",),
}


def metric_columns(task: str) -> list[str]:
    """The per-epoch CSV columns: identical for both frameworks."""
    metrics = TASK_METRICS[task]
    return [
        "epoch", "step", "lr", "train_loss", *(f"train_{m}" for m in metrics),
        "val_loss", *(f"val_{m}" for m in metrics), "epoch_seconds",
    ]  # fmt: skip


@dataclass(frozen=True)
class RunDir:
    path: Path

    @classmethod
    def create(cls, root: Path, name: str) -> RunDir:
        """A new folder ``root/name`` (``name-2``, ``-3``... if taken). ``name`` is one path
        component: a run never lands outside ``export.dir``. Two runs started in the same
        second each get their own folder: ``mkdir`` is the claim, not an ``exists`` check."""
        if not name or name in (".", "..") or "/" in name or "\\" in name or "\0" in name:
            raise SetupError(
                f"export.run_name {name!r} is not a folder name; give a plain name without '/' "
                "or '..' (run folders are created inside export.dir)"
            )
        try:
            root.mkdir(parents=True, exist_ok=True)
        except (FileExistsError, NotADirectoryError):
            raise SetupError(f"export.dir {str(root)!r} is a file, not a folder; choose a folder") from None
        suffix = 1
        while True:
            path = root / (name if suffix == 1 else f"{name}-{suffix}")
            try:
                path.mkdir()
            except FileExistsError:
                suffix += 1
                continue
            run = cls(path)
            run.claim()
            return run

    def claim(self) -> None:
        """Hold the run folder for this process until it exits: an exclusive ``flock`` on
        ``.lock``, so a second ``zoo resume`` (or a resume while the run still trains) is refused
        instead of appending a second copy of every epoch. The kernel drops the lock when the
        holder dies, however it dies; re-claiming in the same process is a no-op."""
        import fcntl
        import socket

        key = str(self.path.resolve())
        if key in _HELD:
            return
        fd = os.open(self.path / ".lock", os.O_RDWR | os.O_CREAT, 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 200).decode(errors="replace").strip() or "another process"
            os.close(fd)
            raise SetupError(
                f"{self.path} is in use by {holder}; wait for that run to end (or stop it), then resume"
            ) from None
        os.ftruncate(fd, 0)
        os.write(fd, f"zoo process {os.getpid()} on {socket.gethostname()}".encode())
        _HELD[key] = fd

    def write_recipe(self, recipe: dict[str, Any], text: str) -> None:
        """``recipe.yaml`` for people, and the same recipe as it was at the start, which resume
        compares the (possibly edited) ``recipe.yaml`` against."""
        self.recipe.write_text(text)
        (self.path / RECORDED_RECIPE).write_text(json.dumps(recipe, indent=1) + "\n")

    def recipe_changes(self, recipe: dict[str, Any]) -> list[str] | None:
        """Fields of ``recipe`` that differ from the recipe the run started with (None when
        the run predates the record)."""
        recorded = self.path / RECORDED_RECIPE
        if not recorded.is_file():
            return None
        before, now = _flat(json.loads(recorded.read_text())), _flat(recipe)
        return [
            f"{key}: {before.get(key, '(unset)')!r} -> {now.get(key, '(unset)')!r}"
            for key in sorted(before.keys() | now.keys())
            # Where the curves go changes nothing the states were trained with.
            if before.get(key) != now.get(key) and not key.startswith("tracking.")
        ]

    @staticmethod
    def default_name(recipe_name: str, framework: str) -> str:
        return f"{recipe_name}-{framework}-{time.strftime('%Y%m%d-%H%M%S')}"

    @property
    def recipe(self) -> Path:
        return self.path / "recipe.yaml"

    @property
    def metrics(self) -> Path:
        return self.path / "metrics.csv"

    @property
    def checkpoint(self) -> Path:
        return self.path / "model.safetensors"

    @property
    def summary(self) -> Path:
        return self.path / "summary.json"

    def write_summary(self, summary: dict[str, Any]) -> None:
        """The run's end record: ``status`` (``finished`` unless said otherwise) and what it
        reached. A run that logs to MLflow closes its MLflow run here, checkpoint included."""
        from zoo.tracking import finish_mlflow

        summary = {"status": "finished", **summary}
        self.summary.write_text(json.dumps(summary, indent=2) + "\n")
        finish_mlflow(self.path, summary)

    def read_summary(self) -> dict[str, Any]:
        try:
            found = json.loads(self.summary.read_text())
        except (OSError, ValueError):
            return {}
        return found if isinstance(found, dict) else {}


RECORDED_RECIPE = ".recipe.json"
_HELD: dict[str, int] = {}  # run folders this process holds the lock of: descriptor by path


def _flat(node: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(node, dict):
        return {k: v for key, value in node.items() for k, v in _flat(value, f"{prefix}{key}.").items()}
    return {prefix.rstrip("."): node}


def prepare_resume(run: RunDir, state_file: Path, recipe: dict[str, Any], force: bool = False) -> None:
    """Everything that must hold before a run continues, checked before any training starts:
    the run is this process's alone, the state reads, the recipe is the one the states came
    from (or ``force``), a diverged run is not replayed into its divergence, and
    ``metrics.csv`` keeps no epoch the state has not reached (it is trained again)."""
    from zoo.state import check_state, step_of

    run.claim()
    check_state(state_file)
    changes = run.recipe_changes(recipe)
    if changes is None:
        log.warning(f"{run.path} has no record of its starting recipe ({RECORDED_RECIPE}); not compared")
        changes = []
    summary = run.read_summary()
    if summary.get("status") == "diverged" and not (force and changes):
        raise SetupError(
            f"{run.path} diverged at step {summary.get('step')} (summary.json); resuming its last "
            f"state replays the same steps into the same divergence. Edit {run.recipe} (a lower "
            "optimizer.lr, schedule.warmup_steps) and run zoo resume --force, or train again"
        )
    if changes and not force:
        shown = "; ".join(changes[:8]) + (f"; and {len(changes) - 8} more" if len(changes) > 8 else "")
        raise SetupError(
            f"{run.recipe} was changed since the run started ({shown}); its states were trained with "
            "the recipe as it was. Undo the change, or run zoo resume --force to continue with it"
        )
    if changes:
        log.warning(f"resuming with a changed recipe (--force): {'; '.join(changes)}")
    if run.metrics.is_file():
        MetricsLog.keep_until(run.metrics, step_of(state_file))


class MetricsLog:
    """Appends one row per epoch; every row is flushed, so a crash keeps what was done."""

    def __init__(self, path: Path, task: str, append: bool = False):
        self.path = path
        self.columns = metric_columns(task)
        if append and path.exists():
            return  # a resumed run continues its file
        with open(path, "w", newline="") as handle:
            csv.writer(handle).writerow(self.columns)

    @staticmethod
    def keep_until(path: Path, step: int) -> None:
        """Drop the rows of epochs that ended after ``step``: a run killed between writing an
        epoch's row and saving its state trains that epoch again, and writes it again."""
        with open(path, newline="") as handle:
            rows = list(csv.reader(handle))
        if not rows or "step" not in rows[0]:
            return
        column = rows[0].index("step")
        kept = [rows[0]] + [
            r for r in rows[1:] if len(r) > column and r[column].isdigit() and int(r[column]) <= step
        ]
        if len(kept) == len(rows):
            return
        temporary = path.with_name(f".{path.name}.tmp")
        with open(temporary, "w", newline="") as handle:
            csv.writer(handle).writerows(kept)
        os.replace(temporary, path)

    def append(self, row: dict[str, Any]) -> None:
        values = [_format(row.get(c)) for c in self.columns]
        with open(self.path, "a", newline="") as handle:
            csv.writer(handle).writerow(values)


def _format(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def read_metrics(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle))


class NonFiniteLoss(RuntimeError):
    """Training stopped because the loss stopped being a number."""

    def __init__(self, value: float, step: int, last_finite: tuple[int, float] | None):
        before = (
            f"the last finite loss was {last_finite[1]:.6g} at step {last_finite[0]}"
            if last_finite
            else "no step had a finite loss"
        )
        super().__init__(
            f"the training loss became {value} at step {step}; {before}. Lower optimizer.lr, "
            "add schedule.warmup_steps, or use trainer.precision '32-true'."
        )
        self.step = step


class NonFiniteWeights(NonFiniteLoss):
    """The weights stopped being numbers while the loss that led there was still finite: the
    state is not saved, so the last one kept is from before."""

    def __init__(self, step: int, names: list[str]):
        RuntimeError.__init__(
            self,
            f"the weights became NaN or infinite at step {step} ({', '.join(names[:3])}"
            f"{' ...' if len(names) > 3 else ''}) although its loss was finite. Lower optimizer.lr, "
            "add schedule.warmup_steps, or use trainer.precision '32-true'.",
        )
        self.step = step


def record_stop(run: RunDir | None, error: BaseException) -> None:
    """What a run that stopped leaves behind, said once by the process that writes the files.

    A diverged run is marked in ``summary.json`` (status, step, the last finite state) and is
    not offered a resume: its states replay the same steps into the same divergence.
    """
    from zoo.state import latest_state

    if run is None:
        return
    last = latest_state(run.path)
    if isinstance(error, NonFiniteLoss):
        run.write_summary({
            "status": "diverged", "step": error.step, "error": str(error),
            "last_finite_state": str(last) if last else None,
        })  # fmt: skip
        kept = f"its last finite state is kept ({last})" if last else "no state was saved before"
        log.error(f"run {run.path} diverged at step {error.step}; {kept}")
        return
    from zoo.tracking import finish_mlflow

    finish_mlflow(run.path, {"status": "interrupted"})  # an MLflow run says KILLED; resume reopens it
    if last is not None:
        log.error(f"the run stopped ({type(error).__name__}); its last state is kept: zoo resume {run.path}")


# ------------------------------------------------------------------------ finding runs

RUN_FILES = ("recipe.yaml", RECORDED_RECIPE, "summary.json", "metrics.csv", "state")
BEST = {"loss": min, "bpc": min, "accuracy": max}  # which way each validation metric improves
STATUSES = ("finished", "interrupted", "diverged", "running", "damaged")


@dataclass(frozen=True)
class RunInfo:
    """What ``zoo runs`` shows of one run folder, read without importing a framework."""

    path: Path
    status: str  # one of STATUSES
    recipe: str | None = None
    framework: str | None = None
    architecture: str | None = None
    task: str | None = None
    epochs: int = 0
    best: tuple[str, float, int] | None = None  # (val metric, its best value, the epoch it came at)
    seconds: float | None = None
    checkpoint: Path | None = None
    problems: tuple[str, ...] = ()  # why a damaged run is damaged

    def to_dict(self) -> dict[str, Any]:
        best = None
        if self.best:
            best = {"metric": self.best[0], "value": self.best[1], "epoch": self.best[2]}
        return {
            "run": self.path.name, "path": str(self.path), "status": self.status, "recipe": self.recipe,
            "framework": self.framework, "architecture": self.architecture, "task": self.task,
            "epochs": self.epochs, "best": best, "seconds": self.seconds,
            "checkpoint": str(self.checkpoint) if self.checkpoint else None, "problems": list(self.problems),
        }  # fmt: skip


def is_run_folder(path: Path) -> bool:
    return path.is_dir() and any((path / name).exists() for name in RUN_FILES)


def find_runs(root: Path) -> list[RunInfo]:
    """Every run folder directly under ``root`` (an export directory), oldest first."""
    if not root.is_dir():
        raise SetupError(f"{root} is not a folder; give the export directory (export.dir) with --dir")
    folders = [p for p in root.iterdir() if is_run_folder(p)]
    return [read_run(p) for p in sorted(folders, key=lambda p: (p.stat().st_mtime, p.name))]


def read_run(path: Path) -> RunInfo:
    """One run folder as it is on disk. Nothing in a damaged folder raises: what cannot be
    read is named in ``problems`` and the run is listed as damaged."""
    import yaml

    problems: list[str] = []
    recipe: dict[str, Any] = {}
    try:
        found = yaml.safe_load((path / "recipe.yaml").read_text())
        if isinstance(found, dict):
            recipe = found
        else:
            problems.append("recipe.yaml is not a recipe")
    except FileNotFoundError:
        problems.append("no recipe.yaml")
    except (OSError, yaml.YAMLError, UnicodeDecodeError) as error:
        problems.append(f"recipe.yaml does not read ({type(error).__name__})")
    summary: dict[str, Any] = {}
    if (path / "summary.json").exists():
        try:
            summary = json.loads((path / "summary.json").read_text())
            if not isinstance(summary, dict):
                summary, problems = {}, [*problems, "summary.json is not an object"]
        except (OSError, ValueError):
            problems.append("summary.json is not JSON")
    rows: list[dict[str, str]] = []
    if (path / "metrics.csv").exists():
        try:
            rows = read_metrics(path / "metrics.csv")
        except (OSError, csv.Error, UnicodeDecodeError):
            problems.append("metrics.csv does not read")
    model = recipe.get("model") if isinstance(recipe.get("model"), dict) else {}
    data = recipe.get("data") if isinstance(recipe.get("data"), dict) else {}
    trainer = recipe.get("trainer") if isinstance(recipe.get("trainer"), dict) else {}
    architecture = summary.get("preset") or summary.get("architecture") or model.get("preset")
    architecture = architecture or model.get("architecture")
    task = data.get("task", "language_modeling") if data.get("name") == "text" else "classification"
    if "task" in model:
        task = model["task"]
    checkpoint = path / "model.safetensors"
    status = _status(path, summary, checkpoint, problems)
    seconds = summary.get("total_seconds")
    if seconds is None and rows:
        seconds = sum(_number(r.get("epoch_seconds")) or 0.0 for r in rows) or None
    return RunInfo(
        path=path, status=status, recipe=summary.get("recipe") or recipe.get("name"),
        framework=summary.get("framework") or trainer.get("framework"), architecture=architecture,
        task=task, epochs=len(rows), best=best_metric(rows), seconds=seconds,
        checkpoint=checkpoint if checkpoint.is_file() else None, problems=tuple(problems),
    )  # fmt: skip


def _status(path: Path, summary: dict[str, Any], checkpoint: Path, problems: list[str]) -> str:
    if summary.get("status") == "diverged":
        return "diverged"
    if _held(path):
        return "running"
    if summary.get("status", "finished") == "finished" and "metrics" in summary:
        if checkpoint.is_file():
            return "damaged" if problems else "finished"
        problems.append("summary.json says finished but model.safetensors is missing")
        return "damaged"
    return "damaged" if problems else "interrupted"


def _held(path: Path) -> bool:
    """Whether a live process holds the run folder's lock (a run training right now)."""
    import fcntl

    lock = path / ".lock"
    if not lock.is_file() or str(path.resolve()) in _HELD:
        return False
    try:
        fd = os.open(lock, os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False
    except BlockingIOError:
        return True
    finally:
        os.close(fd)


def _number(text: Any) -> float | None:
    try:
        return float(text)
    except (TypeError, ValueError):
        return None


def best_metric(rows: list[dict[str, str]]) -> tuple[str, float, int] | None:
    """The best validation value of the task's metric (accuracy up, bpc down; loss where the
    run has nothing else), and the epoch it came at."""
    if not rows:
        return None
    columns = [c for c in rows[0] if c.startswith("val_") and c != "val_loss"] + ["val_loss"]
    for column in columns:
        direction = BEST.get(column.removeprefix("val_"), min)
        values = [(v, i + 1) for i, r in enumerate(rows) if (v := _number(r.get(column))) is not None]
        if values:
            value, epoch = direction(values, key=lambda pair: pair[0])
            return column, value, epoch
    return None


def resolve_run(name: str | Path, root: Path) -> Path:
    """A run given as a path, or as a folder name under ``root``."""
    path = Path(name)
    if is_run_folder(path):
        return path
    if is_run_folder(root / name):
        return root / name
    raise SetupError(
        f"{name} is not a run folder (nor a run under {root}); `zoo runs --dir {root}` lists them"
    )


def next_commands(info: RunInfo) -> dict[str, str]:
    """The commands that take a run further: resume it, evaluate, sample or fine-tune its
    checkpoint, plot it, open its TensorBoard; only those that apply to its state."""
    from zoo.state import latest_state

    run, recipe = info.path, info.path / "recipe.yaml"
    framework = f" --framework {info.framework}" if info.framework else ""
    commands: dict[str, str] = {}
    if info.status == "interrupted" and latest_state(run) is not None:
        commands["resume"] = f"zoo resume {run}"
    elif info.status == "diverged":
        commands["resume"] = (
            f"edit {recipe} (a lower optimizer.lr, schedule.warmup_steps), then zoo resume {run} --force"
        )
    if info.checkpoint is not None:
        commands["evaluate"] = f"zoo evaluate {info.checkpoint} --recipe {recipe}{framework}"
        if info.task == "language_modeling":
            commands["sample"] = f"zoo sample {info.checkpoint} --prompt 'The ' --length 200{framework}"
        commands["finetune"] = f"zoo finetune RECIPE --from {info.checkpoint}"
    if info.epochs:
        commands["plot"] = f"zoo plot {run} -o {run / 'curves.png'}"
    if (run / "tb").is_dir():
        commands["tensorboard"] = f"tensorboard --logdir {run / 'tb'}"
    return commands
