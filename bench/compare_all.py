"""Run ``zoo compare`` over every shipped recipe and write one summary table.

    .venv/bin/python bench/compare_all.py --steps 100

For each recipe in recipes/*.yaml: parity verdicts with their deciding numbers (weights,
forward, gradients, training) and each framework's speed and activation memory. Writes
bench/out/compare_summary.md (printed too) and compare_summary.json; every recipe's full
report (report.json/md/png) lands in bench/out/compare/<recipe>/. A recipe that cannot
be compared gets a row with its error rather than stopping the others.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SECTIONS = ("weights", "forward", "gradients", "training")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=100, help="training steps compared per recipe")
    parser.add_argument("--speed-steps", type=int, default=50, help="timed steps per framework (0: no speed)")
    parser.add_argument("--recipes", nargs="*", type=Path, help="recipe files (default: recipes/*.yaml)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="a.b=VALUE",
                        help="override applied to every recipe; repeatable")  # fmt: skip
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "out", help="output folder")
    args = parser.parse_args(argv)

    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    from zoo.compare import compare

    recipes = args.recipes or sorted((ROOT / "recipes").glob("*.yaml"))
    rows: list[dict[str, Any]] = []
    for recipe in recipes:
        print(f"comparing {recipe.name} ...", file=sys.stderr, flush=True)
        started = time.perf_counter()
        try:
            result = compare(
                recipe,
                steps=args.steps,
                out=args.out / "compare" / recipe.stem,
                overrides=args.overrides,
                speed_steps=args.speed_steps,
            )
        except Exception as error:  # one broken recipe must not hide the others' numbers
            traceback.print_exc()
            rows.append({"recipe": recipe.stem, "error": f"{type(error).__name__}: {error}".splitlines()[0]})
            continue
        rows.append(summary_row(recipe.stem, result.report, time.perf_counter() - started))

    table = markdown(rows, args)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "compare_summary.md").write_text(table)
    (args.out / "compare_summary.json").write_text(json.dumps(rows, indent=2, default=str) + "\n")
    print(table)
    return 0 if all(row.get("verdict") == "PASS" for row in rows) else 1


def summary_row(name: str, report: dict[str, Any], seconds: float) -> dict[str, Any]:
    sections = report["sections"]
    model = report["model"]
    row: dict[str, Any] = {
        "recipe": name,
        "family": model["family"],
        "model": model["preset"] or model["family"],
        "task": model["task"],
        "precision": report["precision"],
        "optimizer": report["run"]["optimizer"]["name"],
        "batch_size": report["run"]["batch_size"],
        "steps": report["run"]["steps"],
        "verdict": report["verdict"],
        "seconds": round(seconds, 1),
        "sections": {
            n: {k: sections[n][k] for k in ("verdict", "value", "tolerance", "reason")} for n in SECTIONS
        },
        "worst": {
            "gradient": sections["gradients"].get("worst_tensor"),
            "final_weights": sections["training"].get("final_weights_worst_tensor"),
            "first_training_step_over": sections["training"].get("first_step_over_tolerance"),
        },
    }
    if report.get("speed"):
        row["speed"] = {side: report["speed"][side] for side in ("torch", "keras")}
    return row


def markdown(rows: list[dict[str, Any]], args) -> str:
    lines = [
        "# zoo compare: every shipped recipe",
        "",
        f"{args.steps} training steps compared per recipe, {args.speed_steps} timed steps per framework; "
        "CPU, one kernel thread per framework. Parity cells: verdict and the deciding number "
        "(weights and forward: max |diff|; gradients: max relative error; training: max |loss gap|). "
        "Memory: bytes saved for backward.",
        "",
        "| recipe | family | model | task | precision | framework | samples/s | ms/step | first step ms "
        "| activation memory | weights | forward | gradients | training | worst tensor / step |",
        "| " + " | ".join(["---"] * 15) + " |",
    ]
    for row in rows:
        if "error" in row:
            lines.append(f"| {row['recipe']} | | | | | | | | | | error: {row['error']} | | | | |")
            continue
        parity = [_cell(row["sections"][n]) for n in SECTIONS]
        worst = row["worst"]
        where = worst["gradient"] or "-"
        if worst["first_training_step_over"]:
            where += f" / step {worst['first_training_step_over']} ({worst['final_weights']})"
        for side in ("torch", "keras"):
            speed = row.get("speed", {}).get(side)
            timing = ["-"] * 4
            if speed:
                timing = [
                    f"{speed['samples_per_s']:,.0f}",
                    f"{speed['ms_per_step']:.2f}",
                    f"{speed['first_step_ms']:,.0f}",
                    _size(speed["activation_bytes"]),
                ]
            first = side == "torch"
            head = (
                [row["recipe"], row["family"], row["model"], row["task"], row["precision"]]
                if first
                else [""] * 5
            )
            tail = [*parity, where] if first else [""] * 5
            lines.append("| " + " | ".join([*head, side, *timing, *tail]) + " |")
    passed = sum(row.get("verdict") == "PASS" for row in rows)
    lines += ["", f"{passed} of {len(rows)} recipes PASS every parity section.", ""]
    return "\n".join(lines)


def _cell(section: dict[str, Any]) -> str:
    value = section["value"]
    number = "0" if value == 0 else f"{value:.1e}"
    return f"{section['verdict']} {number}"


def _size(value: int | None) -> str:
    if value is None:
        return "-"
    return f"{value / 2**20:.1f} MiB" if value >= 2**20 else f"{value / 2**10:.0f} KiB"


if __name__ == "__main__":
    sys.exit(main())
