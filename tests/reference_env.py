"""The reference environment (torchvision, timm) and the fixture files its scripts write.

The reference libraries cannot share zoo's environment (see ``tests/reference/requirements.txt``),
so the tests build a second virtual environment, ``.venv-ref``, the first time one needs it,
and run a script of ``tests/reference/`` there. The script writes what the main suite
compares against (reference weights, inputs, logits, parameter counts) under
``.cache/reference/``; the files are reused until the script or the pinned versions change.
Nothing is downloaded except the pinned packages from the package index.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import re
import subprocess
import sys
import threading
from contextlib import contextmanager
from pathlib import Path

import warm_zoo

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = ROOT / "tests" / "reference"
VENV = ROOT / ".venv-ref"
CACHE = ROOT / ".cache" / "reference"
PINS = (SCRIPTS / "requirements.txt", SCRIPTS / "constraints.txt")
# What the scripts import, once per worker in a server their processes fork from (warm_zoo): a
# script's imports took 4-8 CPU-seconds of a run of a second or two.
PRELOAD = ("shim", "torch", "transformers.modeling_utils", "torchvision", "timm", "peft")


@contextmanager
def _locked(name: str):
    """One process at a time builds the environment or a fixture (tests may run side by side)."""
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / f".{name}.lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield


def _digest(*parts: bytes) -> str:
    return hashlib.sha256(b"\0".join(parts)).hexdigest()[:16]


def python() -> Path:
    """The reference environment's interpreter, built (or rebuilt for new pins) on first use."""
    interpreter = VENV / "bin" / "python"
    with _locked("venv"):
        if _built():
            return interpreter
        pip = [str(interpreter), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
        constraints = ["-c", str(SCRIPTS / "constraints.txt")]
        for command in (
            [sys.executable, "-m", "venv", "--clear", str(VENV)],
            # torch first and alone, so the CPU wheel on disk is the one every later pin sees
            [*pip, *constraints, "torch==2.13.0"],
            [*pip, *constraints, "-r", str(SCRIPTS / "requirements.txt")],
        ):
            done = subprocess.run(command, capture_output=True, text=True)
            if done.returncode:
                raise RuntimeError(f"building {VENV} failed at {' '.join(command)}:\n{done.stderr[-4000:]}")
        want = _pins_digest()
        (VENV / ".installed").write_text(want)
        (VENV / f".installed-{want}").touch()
    return interpreter


def build_in_background() -> None:
    """Start building the environment in a thread of this process, if it is not built.

    Building it is mostly waiting on the package index and the disk (1.5 minutes here, 25
    seconds of CPU): the pytest controller, idle while its workers test, starts it as the session
    begins, and the first test that needs it waits on the lock only for what is left, instead
    of holding a worker for all of it. A build cut short (the session ended first) leaves no stamp
    and is redone whole by the next :func:`python`."""
    if not _built():
        threading.Thread(target=_build_quietly, name="reference-env", daemon=True).start()


def _pins_digest() -> str:
    return _digest(*(path.read_bytes() for path in PINS))


def _built() -> bool:
    """Whether the environment satisfies today's pins. One stamp per pin set it satisfies: a
    package added to the pins and installed into it (peft) leaves the stamp of the pins before,
    which older checkouts sharing the environment read, where it is: neither rebuilds it from
    scratch for the other."""
    want, stamp = _pins_digest(), VENV / ".installed"
    return (VENV / f".installed-{want}").is_file() or (stamp.is_file() and stamp.read_text() == want)


def _build_quietly() -> None:
    # a failure is the next caller's to report: the test that needs the environment builds again
    with contextlib.suppress(RuntimeError):
        python()


def fixtures(script: str, *args: str) -> Path:
    """Run ``tests/reference/<script> OUT *args`` in the reference environment (once per
    script text, shim, pins and arguments) and return OUT, the folder it wrote."""
    source = SCRIPTS / script
    key = _digest(
        *(path.read_bytes() for path in _sources(source)), *(p.read_bytes() for p in PINS),
        "\0".join(args).encode(),
    )  # fmt: skip
    out = CACHE / f"{Path(script).stem}-{'-'.join(args)}-{key}"
    interpreter = python()
    with _locked(out.name):
        if (out / ".done").is_file():
            return out
        out.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "PYTHONPATH": str(SCRIPTS), "CUDA_VISIBLE_DEVICES": ""}
        done = warm_zoo.run(
            [str(interpreter), str(source), str(out), *args], capture_output=True, text=True, env=env,
            preload=PRELOAD,
        )  # fmt: skip
        if done.returncode:
            raise RuntimeError(f"{script} {' '.join(args)} failed in {VENV}:\n{done.stderr[-4000:]}")
        (out / ".done").touch()
    return out


def _sources(script: Path) -> list[Path]:
    """The script and every module of ``tests/reference/`` it imports (the shim, another
    script's helpers): a change to any of them makes new fixtures."""
    imported = set(re.findall(r"^(?:import|from) (\w+)", script.read_text(), re.MULTILINE))
    return [script, *sorted(p for p in SCRIPTS.glob("*.py") if p.stem in imported and p != script)]


def run(script: str, out: Path, *args: str) -> Path:
    """Run ``tests/reference/<script> OUT *args`` in the reference environment on files a test
    wrote (not cached: they change with zoo's code); return OUT."""
    env = {**os.environ, "PYTHONPATH": str(SCRIPTS), "CUDA_VISIBLE_DEVICES": ""}
    done = warm_zoo.run(
        [str(python()), str(SCRIPTS / script), str(out), *args], capture_output=True, text=True, env=env,
        preload=PRELOAD,
    )  # fmt: skip
    if done.returncode:
        raise RuntimeError(f"{script} {' '.join(args)} failed in {VENV}:\n{done.stderr[-4000:]}")
    return out
