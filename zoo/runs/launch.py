"""Where a run is started from: which process writes the run's files, and whether the
scheduler's launcher variables (torchrun, SLURM, TF_CONFIG) agree with the recipe's layout."""

from __future__ import annotations

import logging
import os
import socket

from zoo.hardware import SetupError
from zoo.limits import json_kind, parse_json

log = logging.getLogger("zoo")


def is_primary_process() -> bool:
    """Whether this process writes the run's files: rank 0 of Lightning/torchrun/SLURM or
    the chief of a TF_CONFIG cluster (every data-parallel process runs the same code)."""
    env = os.environ
    for name in ("RANK", "LOCAL_RANK", "NODE_RANK", "SLURM_PROCID"):
        if env.get(name, "0") != "0":
            return False
    if "TF_CONFIG" in env:
        task = tf_config(env["TF_CONFIG"]).get("task", {})
        return task.get("index", 0) == 0 and task.get("type", "worker") in ("worker", "chief")
    return True


def tf_config(text: str) -> dict:
    """``$TF_CONFIG``, the object TensorFlow reads (``cluster`` of lists, ``task`` an object)."""
    fix = (
        'TensorFlow reads {"cluster": {"worker": ["host:port", ...]}, "task": {"type": "worker", "index": 0}}'
    )
    found = parse_json(text, f"TF_CONFIG {text[:80]!r}", error=SetupError, fix=fix)
    cluster, task = found.get("cluster", {}), found.get("task", {})
    if not isinstance(cluster, dict) or not all(isinstance(v, list) for v in cluster.values()):
        raise SetupError(f"TF_CONFIG's cluster is not an object of lists of addresses; {fix}")
    if not isinstance(task, dict):
        raise SetupError(f"TF_CONFIG's task is a JSON {json_kind(task)}, not an object; {fix}")
    return found


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
        found = tf_config(env["TF_CONFIG"])
        ranks.append(str(found.get("task", {}).get("index", 0)))
        worlds.append(str(sum(len(v) for v in found.get("cluster", {}).values())))
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


def free_ports(count: int) -> list[int]:
    """``count`` distinct TCP ports free on this machine now: a one-machine cluster's
    ``MASTER_PORT`` or TF_CONFIG addresses (the tests' and benchmarks' launches). All are
    held open together, so no two are the same; another program may still take one after."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()
