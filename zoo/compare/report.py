"""The comparison report: a terminal table, report.json, report.md and report.png.

The JSON holds everything (every step's loss in both frameworks, every tensor's gap);
the table and the Markdown say what a reader needs first: each section's verdict, the
number that decided it, and where parity broke (which tensor, which step).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from zoo.compare.results import fmt, json_ready

SECTIONS = ("weights", "forward", "gradients", "training")


def title(report: dict[str, Any]) -> str:
    model = report["model"]
    name = model["preset"] or model["family"]
    run = report["run"]
    return (
        f"zoo compare {report['recipe']}: {name} ({model['family']}, {model['task']}), "
        f"{report['precision']}, {run['optimizer']['name']}, batch {run['batch_size']}, "
        f"{run['steps']} steps, CPU (threads: torch {report['threads']['torch']}, "
        f"tensorflow {report['threads']['tensorflow']}; oneDNN {report.get('tensorflow_onednn', 'default')})"
    )


def ran(report: dict[str, Any]) -> list[str]:
    """The parity sections the comparison ran: all, or without training (``--forward-only``)."""
    return [name for name in SECTIONS if name in report["sections"]]


def terminal_table(report: dict[str, Any], out: Path | None) -> str:
    lines = [title(report), *(f"note: {n}" for n in report["notes"]), ""]
    rows = [("SECTION", "VERDICT", "VALUE", "TOLERANCE", "REASON")]
    for name in ran(report):
        section = report["sections"][name]
        rows.append(
            (name, section["verdict"], fmt(section["value"]), fmt(section["tolerance"]), section["reason"])
        )
    lines += _columns(rows)
    training = report["sections"].get("training", {})
    if training.get("resync_summary"):
        lines += ["", *_columns(_resync_rows(training))]
    speed = report.get("speed")
    if speed:
        lines += ["", *_columns(_speed_rows(speed))]
    passed = sum(report["sections"][n]["verdict"] == "PASS" for n in ran(report))
    lines += ["", f"verdict: {report['verdict']} ({passed} of {len(ran(report))} parity sections pass)"]
    if out is not None:
        also = "report.json, report.png" if "training" in report["sections"] else "report.json"
        lines.append(f"report: {out / 'report.md'} (also {also})")
    return "\n".join(lines)


RESYNC_CHECKS = (
    ("forward", "OUTPUTS"),
    ("loss", "LOSS"),
    ("gradients", "GRADIENTS (rel.)"),
    ("update", "ONE UPDATE (rel.)"),
)


def _resync_rows(training: dict[str, Any]) -> list[tuple[str, ...]]:
    """One row per re-synchronised step: each check's worst figure against its bound."""
    rows = [("RE-SYNC AT STEP", *(label for _, label in RESYNC_CHECKS), "")]
    for point in training["resync_summary"]:
        cells = []
        for kind, _ in RESYNC_CHECKS:
            check = point.get(kind)
            if check is None:
                cells.append("-")
                continue
            sign = "<=" if check["passed"] else ">"
            cells.append(f"{fmt(check['value'])} {sign} {fmt(check['limit'])}")
        worst = "" if point["passed"] else "DIFFERS: " + _failing(point)
        rows.append((str(point["step"]), *cells, worst))
    return rows


def _failing(point: dict[str, Any]) -> str:
    return ", ".join(
        f"{kind} ({point[kind]['name']})"
        for kind, _ in RESYNC_CHECKS
        if kind in point and not point[kind]["passed"]
    )


def _speed_rows(speed: dict[str, Any]) -> list[tuple[str, ...]]:
    t, k = speed["torch"], speed["keras"]
    return [
        ("SPEED", "TORCH", "KERAS"),
        ("samples/s", f"{t['samples_per_s']:,.0f}", f"{k['samples_per_s']:,.0f}"),
        ("ms/step (median)", f"{t['ms_per_step']:.2f}", f"{k['ms_per_step']:.2f}"),
        ("first step (ms)", f"{t['first_step_ms']:,.1f}", f"{k['first_step_ms']:,.1f}"),
        ("saved for backward", size(t["activation_bytes"]), size(k["activation_bytes"])),
        ("allocator peak", "-", size(k.get("allocator_peak_bytes"))),
        ("parameters", f"{t['parameters']:,}", f"{k['parameters']:,}"),
    ]


def size(value: int | None) -> str:
    if value is None:
        return "-"
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(value) >= scale:
            return f"{value / scale:.1f} {unit}"
    return f"{value} B"


def _columns(rows: list[tuple[str, ...]]) -> list[str]:
    widths = [max(len(str(row[i])) for row in rows) for i in range(len(rows[0]))]
    return ["  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in rows]


# ------------------------------------------------------------------------------ files


REPORT_FILES = ("report.json", "report.md", "report.png")  # what a comparison writes in its folder


def write_reports(report: dict[str, Any], out: Path) -> dict[str, Path]:
    out.mkdir(parents=True, exist_ok=True)
    paths = {"json": out / "report.json", "md": out / "report.md"}
    paths["json"].write_text(json.dumps(json_ready(report), indent=2) + "\n")
    paths["md"].write_text(markdown(report))
    if "training" in report["sections"]:  # the loss curves
        paths["png"] = out / "report.png"
        plot(report, paths["png"])
    return paths


def markdown(report: dict[str, Any]) -> str:
    sections = report["sections"]
    lines = [f"# {title(report)}", ""]
    lines += [f"- {n}" for n in report["notes"]] + [""]
    lines += [f"**Verdict: {report['verdict']}**", ""]
    lines += _md_table(
        ("section", "verdict", "measure", "value", "tolerance", "reason"),
        [
            (n, s["verdict"], s["measure"], fmt(s["value"]), fmt(s["tolerance"]), s["reason"])
            for n, s in ((n, sections[n]) for n in ran(report))
        ],
    )
    forward = sections["forward"]
    reference = forward.get("reference")
    lines += ["", "## Forward (first batch)", ""]
    if reference:
        lines += [
            f"Bound = torch's own rounding (its distance from torch in {reference}) + keras's own "
            f"rounding + {fmt(report['tolerances']['forward'])}: the triangle inequality through the "
            f"{reference} twins, which must agree to that allowance.",
            "",
        ]
    lines += _bounded_table([forward["train"], forward["eval"], forward["loss"]], "mode", relative=False)
    grads = sections["gradients"]
    lines += ["", "## Gradients (first batch), closest to their bound first", ""]
    lines += [f"Loss: torch {grads['loss']['torch']:.8g}, keras {grads['loss']['keras']:.8g}", ""]
    lines += _bounded_table(grads["tensors"][:10], "tensor", relative=True)
    if "training" in sections:
        lines += _training_markdown(sections["training"])
    lines += ["", "## Weights right after the copy", ""]
    lines += _tensor_table(sections["weights"]["tensors"][:5], "max abs value")
    speed = report.get("speed")
    if speed:
        lines += ["", f"## Speed and memory (recipe's config, batch {speed['batch_size']})", ""]
        rows = _speed_rows(speed)
        lines += _md_table(rows[0], rows[1:])
        lines += [
            "",
            f"- torch activation memory: {speed['torch']['activation_measure']}",
            f"- keras activation memory: {speed['keras']['activation_measure']}",
            f"- keras allocator peak: {speed['keras'].get('allocator_measure')}",
            f"- ms/step per window: torch {speed['torch']['window_ms_per_step']}, "
            f"keras {speed['keras']['window_ms_per_step']}",
        ]
    lines += ["", "## Tolerances", ""]
    lines += _md_table(tuple(report["tolerances"]), [tuple(fmt(v) for v in report["tolerances"].values())])
    return "\n".join(lines) + "\n"


def _training_markdown(training: dict[str, Any]) -> list[str]:
    lines = ["", f"## Training ({training['steps']} steps)", "", "![losses](report.png)", ""]
    lines += _md_table(("step", "lr", "torch loss", "keras loss", "gap", "bound"), _loss_rows(training))
    floor = training.get("noise_floor")
    if floor:
        lines += [
            "",
            f"Noise floor ({floor['reference']} runs of both twins on the same batches): {floor['verdict']}.",
        ]
    if training.get("resync_summary"):
        lines += [
            "",
            "### Re-synchronised steps",
            "",
            "From the torch twin's state before each step (weights, running statistics, optimizer "
            "moments and step), both twins of both precisions on that step's batch: outputs and loss "
            "(absolute), gradients and one optimizer update from torch's gradients (relative to the "
            "tensor's largest), each against its bound.",
            "",
        ]
        rows = _resync_rows(training)
        lines += _md_table(rows[0], rows[1:])
    lines += ["", "Final tensors, worst first:", ""]
    lines += _tensor_table(training["final_weights"], "max abs value")
    return lines


def _bounded_table(rows: list[dict[str, Any]], what: str, relative: bool) -> list[str]:
    unit = " (relative)" if relative else ""
    header = (
        what,
        "shape",
        f"gap{unit}",
        f"torch rounding{unit}",
        f"keras rounding{unit}",
        f"reference gap{unit}",
        f"bound{unit}",
        "",
    )

    def scaled(value: float | None, row: dict[str, Any]) -> str:
        if value is None:
            return "-"
        return fmt(value / row["scale"] if relative and row["scale"] else value)

    return _md_table(
        header,
        [
            (
                r["name"],
                "x".join(map(str, r["shape"])) or "scalar",
                scaled(r["gap"], r),
                scaled(r["torch_rounding"], r),
                scaled(r["keras_rounding"], r),
                scaled(r["reference_gap"], r),
                scaled(r["limit"], r),
                "PASS" if r["passed"] else "DIFFERS",
            )
            for r in rows
        ],
    )


def _loss_rows(training: dict[str, Any]) -> list[tuple[str, ...]]:
    steps = training["steps"]
    shown = sorted({1, 2, 3, 5, 10, 20, 50, 100, 200, 500, 1000, steps, training["max_gap_step"]})
    first = training["first_step_over_tolerance"]
    if first:
        shown = sorted({*shown, first})
    rows = []
    for step in (s for s in shown if s <= steps):
        i = step - 1
        rows.append(
            (
                str(step),
                f"{training['lr'][i]:.3g}",
                f"{training['loss']['torch'][i]:.8g}",
                f"{training['loss']['keras'][i]:.8g}",
                fmt(training["gap"][i]),
                fmt(training["limit"][i]),
            )
        )
    return rows


def _tensor_table(rows: list[dict[str, Any]], scale: str) -> list[str]:
    return _md_table(
        ("tensor", "shape", "max abs diff", scale, "relative"),
        [
            (
                r["name"],
                "x".join(map(str, r["shape"])) or "scalar",
                fmt(r["max_abs_diff"]),
                fmt(r["scale"]),
                fmt(r["relative"]),
            )
            for r in rows
        ],
    )


def _md_table(header: tuple[str, ...], rows: list[tuple[str, ...]]) -> list[str]:
    def line(cells) -> str:
        return "| " + " | ".join(str(c).replace("|", "\\|") for c in cells) + " |"

    return [line(header), line(["---"] * len(header)), *(line(r) for r in rows)]


def plot(report: dict[str, Any], path: Path) -> None:
    """Both loss curves; below, their absolute difference on a log axis with the tolerance
    and torch's own distance from its run in a higher precision (the noise floor)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    training = report["sections"]["training"]
    gap = np.asarray(training["gap"], dtype=float)
    steps = np.arange(1, len(gap) + 1)
    figure, (top, bottom) = plt.subplots(2, 1, figsize=(8, 7), sharex=True, constrained_layout=True)
    top.plot(steps, training["loss"]["torch"], label="torch (Lightning twin)", linewidth=1.5)
    top.plot(steps, training["loss"]["keras"], label="keras (TensorFlow twin)", linewidth=1.0, linestyle="--")
    top.set_ylabel("training loss")
    model = report["model"]["preset"] or report["model"]["family"]
    title = f"{report['recipe']} ({model}, {report['precision']}): training loss, same init and batches"
    top.set_title(f"{title} - {training['verdict']}", fontsize="medium")
    top.legend()
    top.grid(alpha=0.3)

    zeros = int(np.sum(gap == 0))
    marker = "." if len(gap) <= 200 else None
    bottom.semilogy(
        steps, _positive(gap), color="tab:red", linewidth=1.0, marker=marker, label="|torch - keras|"
    )
    reference = training.get("noise_floor")
    if reference:
        name = reference["reference"]
        for side, color in (("torch", "tab:gray"), ("keras", "tab:olive")):
            floor = np.asarray(reference[f"{side}_gap"], dtype=float)
            bottom.semilogy(steps, _positive(floor), color=color, linewidth=0.8, alpha=0.8,
                            label=f"|{side} - {side} in {name}| (its own rounding)")  # fmt: skip
    limit = np.asarray(training["limit"], dtype=float)
    bottom.semilogy(
        steps, _positive(limit), color="black", linestyle=":", label="bound (both roundings + allowance)"
    )
    labelled = set()
    for point in training.get("resync", []):
        passed = point["passed"]
        label = None if passed in labelled else f"re-synchronised: twins {'agree' if passed else 'differ'}"
        labelled.add(passed)
        color = "tab:green" if passed else "tab:red"
        bottom.axvline(point["step"], color=color, alpha=0.3, linewidth=3, label=label)
    first = training["first_step_over_tolerance"]
    if first:
        bottom.axvline(
            first, color="tab:orange", linestyle="--", label=f"first over the bound (step {first})"
        )
    bottom.set_xlabel("step")
    bottom.set_ylabel("|loss gap|" + (f" ({zeros} steps exactly 0, not drawn)" if zeros else ""))
    bottom.legend(fontsize="small")
    bottom.grid(alpha=0.3, which="both")
    figure.savefig(path, dpi=100)
    plt.close(figure)


def _positive(values: np.ndarray) -> np.ndarray:
    """A log axis cannot show 0 or infinity: leave those points out."""
    return np.where(np.isfinite(values) & (values > 0), values, np.nan)
