"""Run ``zoo compare`` over every shipped recipe, in each precision, with TensorFlow's
oneDNN on and off, and write one summary.

    .venv/bin/python bench/compare_all.py                          # the whole matrix
    .venv/bin/python bench/compare_all.py --precisions 32-true --onednn 1 --speed-steps 50

Each (recipe, precision, oneDNN) cell runs in its own process: TensorFlow reads
``TF_ENABLE_ONEDNN_OPTS`` once, when it is imported. A cell's full report
(report.json/md/png) lands in bench/out/compare/<recipe>/<precision>-onednn<0|1>/; the
summary goes to bench/out/compare_summary.md (printed too) and compare_summary.json. A
cell that cannot be compared gets a row with its error rather than stopping the others.

Per cell the summary gives the verdict, the largest loss gap and the bound at that step,
the first step over the bound (training then re-synchronises), and how close the twins
are from re-synchronised states: the worst output gap, the worst relative gradient gap
and the worst relative gap after one optimizer update, each with its bound.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SECTIONS = ("weights", "forward", "gradients", "training")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=100, help="training steps compared per cell")
    parser.add_argument("--speed-steps", type=int, default=0, help="timed steps per framework (0: no speed)")
    parser.add_argument("--recipes", nargs="*", type=Path, help="recipe files (default: recipes/*.yaml)")
    parser.add_argument("--precisions", nargs="*", default=["32-true", "bf16-mixed"])
    parser.add_argument("--onednn", nargs="*", default=["1", "0"], choices=["0", "1"],
                        help="TF_ENABLE_ONEDNN_OPTS values, one process each")  # fmt: skip
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="a.b=VALUE",
                        help="override applied to every recipe; repeatable")  # fmt: skip
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "out", help="output folder")
    parser.add_argument("--cell", nargs=3, metavar=("RECIPE", "PRECISION", "ONEDNN"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.cell:
        return run_cell(args)

    recipes = args.recipes or sorted((ROOT / "recipes").glob("*.yaml"))
    rows: list[dict[str, Any]] = []
    for recipe in recipes:
        for precision in args.precisions:
            for onednn in args.onednn:
                rows.append(spawn(recipe, precision, onednn, args))
                write_summary(rows, args)  # partial results survive an interrupted matrix
    print(markdown(rows, args))
    return 0 if all(row.get("verdict") == "PASS" for row in rows) else 1


def cell_dir(out: Path, recipe: Path, precision: str, onednn: str) -> Path:
    return out / "compare" / recipe.stem / f"{precision}-onednn{onednn}"


def spawn(recipe: Path, precision: str, onednn: str, args) -> dict[str, Any]:
    """One cell in a fresh process with oneDNN set before TensorFlow is imported."""
    print(f"comparing {recipe.name} {precision} oneDNN={onednn} ...", file=sys.stderr, flush=True)
    env = {**os.environ, "TF_ENABLE_ONEDNN_OPTS": onednn, "TF_CPP_MIN_LOG_LEVEL": "2"}
    command = [
        sys.executable, __file__, "--cell", str(recipe), precision, onednn, "--steps", str(args.steps),
        "--speed-steps", str(args.speed_steps), "--out", str(args.out),
        *(f"--set={o}" for o in args.overrides),
    ]  # fmt: skip
    row_file = cell_dir(args.out, recipe, precision, onednn) / "row.json"
    row_file.unlink(missing_ok=True)  # never read a previous run's row
    started = time.perf_counter()
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    if done.returncode in (0, 1) and row_file.exists():
        return json.loads(row_file.read_text())
    tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or [f"exit {done.returncode}"]
    return {
        "recipe": recipe.stem,
        "precision": precision,
        "onednn": onednn,
        "error": tail[0],
        "seconds": round(time.perf_counter() - started, 1),
    }


def run_cell(args) -> int:
    """Inside the child: one comparison, its report, and its summary row as row.json."""
    from zoo.compare import compare

    recipe, precision, onednn = Path(args.cell[0]), args.cell[1], args.cell[2]
    out = cell_dir(args.out, recipe, precision, onednn)
    started = time.perf_counter()
    try:
        result = compare(
            recipe,
            steps=args.steps,
            out=out,
            overrides=[*args.overrides, f"trainer.precision={precision}"],
            speed_steps=args.speed_steps,
        )
    except Exception as error:  # the parent writes the error row
        traceback.print_exc()
        print(f"{type(error).__name__}: {error}".splitlines()[0], file=sys.stderr)
        return 2
    row = summary_row(recipe.stem, onednn, result.report, time.perf_counter() - started)
    (out / "row.json").write_text(json.dumps(row, indent=2, default=str) + "\n")
    print(result.text)
    return 0 if result.passed else 1


def summary_row(name: str, onednn: str, report: dict[str, Any], seconds: float) -> dict[str, Any]:
    sections = report["sections"]
    model = report["model"]
    training = sections["training"]
    row: dict[str, Any] = {
        "recipe": name,
        "family": model["family"],
        "model": model["preset"] or model["family"],
        "task": model["task"],
        "precision": report["precision"],
        "onednn": onednn,
        "reference": report.get("reference_precision"),
        "optimizer": report["run"]["optimizer"]["name"],
        "batch_size": report["run"]["batch_size"],
        "steps": report["run"]["steps"],
        "verdict": report["verdict"],
        "seconds": round(seconds, 1),
        "sections": {
            n: {k: sections[n][k] for k in ("verdict", "value", "tolerance", "reason")} for n in SECTIONS
        },
        "training": {
            "max_gap": training["value"],
            "max_gap_step": training["max_gap_step"],
            "bound_there": training["tolerance"],
            "first_step_over_bound": training["first_step_over_tolerance"],
            "amplified_rounding": training.get("amplified_rounding"),
            "resync_steps": [p["step"] for p in training.get("resync_summary", [])],
            "resync": resync_worst(training.get("resync_summary", [])),
        },
        "own_rounding": {
            "forward": sections["forward"].get("own_rounding"),
            "gradients": sections["gradients"].get("own_rounding"),
        },
    }
    if report.get("speed"):
        row["speed"] = {side: report["speed"][side] for side in ("torch", "keras")}
    return row


def resync_worst(points: list[dict[str, Any]]) -> dict[str, Any]:
    """Per check, the re-synchronised step whose figure uses the most of its bound."""
    worst: dict[str, Any] = {}
    for point in points:
        for kind in ("forward", "loss", "gradients", "update"):
            check = point.get(kind)
            if not check:
                continue
            use = check["value"] / check["limit"] if check["limit"] else float(check["value"] > 0)
            if kind not in worst or use > worst[kind]["use"]:
                worst[kind] = {**check, "step": point["step"], "use": use}
    return worst


def write_summary(rows: list[dict[str, Any]], args) -> None:
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "compare_summary.md").write_text(markdown(rows, args))
    (args.out / "compare_summary.json").write_text(json.dumps(rows, indent=2, default=str) + "\n")


def markdown(rows: list[dict[str, Any]], args) -> str:
    lines = [
        "# zoo compare: every shipped recipe, precision and oneDNN setting",
        "",
        f"{args.steps} training steps compared per cell, one process per cell, CPU, one kernel thread "
        "per framework. Bounds are measured, not fixed: each framework's own distance from its run in "
        "the reference precision (float64 for 32-true, float32 for bf16-mixed) plus a fixed allowance "
        "for the reference twins (zoo/compare/tolerances.py). Re-sync: from the torch twin's state at "
        "steps 1, 25%, 50%, 75%, 100% of the run (and the first step over the bound), outputs, "
        "gradients and one optimizer update of both twins; each cell shows the worst value <= its bound.",
        "",
        "| recipe | precision | oneDNN | verdict | max loss gap (step) | bound there | first over "
        "| re-sync outputs | re-sync gradients (rel.) | re-sync update (rel.) | own gradient rounding "
        "torch / keras | seconds |",
        "| " + " | ".join(["---"] * 12) + " |",
    ]
    for row in rows:
        head = [row["recipe"], row.get("precision", ""), row.get("onednn", "")]
        if "error" in row:
            lines.append(
                "| " + " | ".join([*head, f"error: {row['error']}", *[""] * 7, str(row["seconds"])]) + " |"
            )
            continue
        training = row["training"]
        resync = training["resync"]
        own = row["own_rounding"]["gradients"] or {}
        cells = [
            row["verdict"] + (" (amplified rounding)" if training["amplified_rounding"] else ""),
            f"{_num(training['max_gap'])} ({training['max_gap_step']})",
            _num(training["bound_there"]),
            str(training["first_step_over_bound"] or "-"),
            _check(resync.get("forward")),
            _check(resync.get("gradients")),
            _check(resync.get("update")),
            f"{_num(own.get('torch'))} / {_num(own.get('keras'))}" if own else "-",
            f"{row['seconds']:.0f}",
        ]
        lines.append("| " + " | ".join([*head, *cells]) + " |")
    passed = sum(row.get("verdict") == "PASS" for row in rows)
    lines += ["", f"{passed} of {len(rows)} cells PASS every parity section.", ""]
    failing = [row for row in rows if row.get("verdict") not in ("PASS", None)]
    for row in failing:
        lines.append(f"- {row['recipe']} {row['precision']} oneDNN={row['onednn']}:")
        for name, section in row["sections"].items():
            if section["verdict"] != "PASS":
                lines.append(f"  - {name}: {section['reason']}")
    return "\n".join(lines) + "\n"


def _num(value: float | None) -> str:
    if value is None:
        return "-"
    return "0" if value == 0 else f"{value:.1e}"


def _check(check: dict[str, Any] | None) -> str:
    if not check:
        return "-"
    sign = "<=" if check["passed"] else ">"
    return f"{_num(check['value'])} {sign} {_num(check['limit'])} (step {check['step']})"


if __name__ == "__main__":
    sys.exit(main())
