"""Turns the collected results into the summary lines (each against its bar), the markdown
report and the PNG chart. Pure functions of the results dictionary that run.py writes to
``results.json``, so a report can be re-rendered from a saved run:

    .venv/bin/python benches/report.py bench-results/results.json
"""

from __future__ import annotations

import json
import math
import pathlib
import sys
from collections.abc import Callable, Iterable
from typing import Any

from machine import BUSY_THRESHOLD, UNEVEN_THRESHOLD, is_uneven, unevenness

BACKENDS = ("eager", "inductor", "fxmlir")
LABELS = {"eager": "eager", "inductor": "Inductor", "fxmlir": "fxmlir"}
COLORS = {"eager": "tab:gray", "inductor": "tab:blue", "fxmlir": "tab:orange"}

BUSY_MARK = "(busy)"
UNEVEN_MARK = "(uneven CPUs)"
#: Above this interquartile range relative to the median, a time cell also shows the minimum.
NOISY_IQR = 0.25

# The bars of issue 4.
RUNTIME_GEOMEAN_BAR = 1.0
RUNTIME_MAX_BAR = 1.5
COMPILE_BAR = 0.1
GEMM_BAR = 0.9
BANDWIDTH_BAR = 0.8
OVERHEAD_BAR_US = 10.0

# The bars of issue 36 (models at real sizes).
REAL_GEOMEAN_BAR = 0.7
REAL_MAX_BAR = 1.0
#: ResNet-50's GFLOP/s against the FMA peak measured with it.
RESNET50_PEAK_BAR = 0.5


# ---------------------------------------------------------------------------------------------
# Derived figures


def geomean(values: Iterable[float]) -> float:
    values = list(values)
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else math.nan


def ok(result: dict[str, Any] | None) -> bool:
    """A backend result that ran and matched eager."""
    return bool(result) and "error" not in result and result.get("check", {}).get("ok", True)


def timed(row: dict[str, Any], backend: str) -> float | None:
    result = row.get(backend) or {}
    return result.get("ms") if ok(result) else None


def ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def gflops(row: dict[str, Any], backend: str) -> float | None:
    ms = timed(row, backend)
    return row["flops"] / ms / 1e6 if ms else None


def of_peak(row: dict[str, Any], backend: str) -> float | None:
    """A real-size case's GFLOP/s as a fraction of the FMA peak measured with it."""
    return ratio(gflops(row, backend), row.get("peak_gflops"))


def gbps(row: dict[str, Any], backend: str) -> float | None:
    ms = timed(row, backend)
    return row["bytes"] / ms / 1e6 if ms else None


def rows_of(results: dict[str, Any], group: str, extra: bool | None = False) -> list[dict]:
    """The case rows of a group (``extra=None``: with the extra cases too)."""
    return [
        r
        for r in results.get("cases", [])
        if r.get("group") == group and (extra is None or r.get("extra", False) == extra)
    ]


def busy(result: dict[str, Any] | None) -> bool:
    """Other processes used the machine while this result was measured."""
    return (result or {}).get("others_busy", 0.0) > BUSY_THRESHOLD


def uneven(result: dict[str, Any] | None) -> bool:
    """The CPUs ran at uneven speeds just before this result was measured."""
    return is_uneven((result or {}).get("cpu_gflops") or [])


def label(row: dict[str, Any]) -> str:
    return (
        row["case"]
        + (" (extra)" if row.get("extra") else "")
        + (f" {BUSY_MARK}" if busy(row) else "")
        + (f" {UNEVEN_MARK}" if uneven(row) else "")
    )


def first_call(row: dict[str, Any], backend: str) -> float | None:
    result = row.get(backend) or {}
    return result.get("first_call_ms") if ok(result) else None


def backend_compile(row: dict[str, Any], backend: str) -> float | None:
    """The backend's time on the first call: the ATen graph's capture and the compile (for
    fxmlir, all of it, including what ran on a thread of its own beside Dynamo)."""
    result = row.get(backend) or {}
    return result.get("backend_compile_ms") if ok(result) else None


# ---------------------------------------------------------------------------------------------
# Summary lines


def _line(name: str, text: str, bar: str, met: bool | None, value: float | None) -> dict:
    verdict = {True: "met", False: "NOT met", None: "not measured"}[met]
    return {
        "metric": name,
        "value": value,
        "bar": bar,
        "met": met,
        "text": f"{text} (bar: {bar}: {verdict})",
    }


def _ratios(rows: list[dict], fn: Callable[[dict], float | None]) -> tuple[dict, list[str]]:
    values, missing = {}, []
    for r in rows:
        v = fn(r)
        if v is None:
            missing.append(r["case"])
        else:
            values[r["case"]] = v
    return values, missing


def _missing(missing: list[str]) -> str:
    return f"; no valid figure for {', '.join(missing)}" if missing else ""


def summary(results: dict[str, Any]) -> list[dict[str, Any]]:
    lines = []
    tasks = results["meta"].get("tasks") or {}
    if tasks:
        worst = max(m["others_busy"] for m in tasks.values())
        lines.append(
            _line(
                "quiet_machine",
                f"other processes used at most {worst:.0%} of the CPUs during a task",
                f"<= {BUSY_THRESHOLD:.0%}, else every figure is suspect",
                worst <= BUSY_THRESHOLD,
                worst,
            )
        )
    models = rows_of(results, "model")
    if models:
        run, missing = _ratios(models, lambda r: ratio(timed(r, "fxmlir"), timed(r, "inductor")))
        g = geomean(run.values())
        worst = max(run, key=run.get) if run else None
        met = None if not run else (g <= RUNTIME_GEOMEAN_BAR and not missing)
        lines.append(
            _line(
                "runtime_geomean",
                f"runtime fxmlir/Inductor, geomean over {len(run)} model cases: {g:.2f}"
                + _missing(missing),
                f"<= {RUNTIME_GEOMEAN_BAR}",
                met,
                g,
            )
        )
        if worst:
            top = run[worst]
            lines.append(
                _line(
                    "runtime_max",
                    f"runtime fxmlir/Inductor, max: {top:.2f} ({worst})",
                    f"none above {RUNTIME_MAX_BAR}",
                    top <= RUNTIME_MAX_BAR and not missing,
                    top,
                )
            )
        compile_times = (
            (
                "compile_geomean",
                "compile time (in the backend: the ATen graph's capture + the compiler)",
                backend_compile,
            ),
            (
                "first_call_geomean",
                "first call (Dynamo's tracing + the backend + one run)",
                first_call,
            ),
        )
        for metric, what, time_of in compile_times:
            comp, missing = _ratios(
                models, lambda r, t=time_of: ratio(t(r, "fxmlir"), t(r, "inductor"))
            )
            g = geomean(comp.values())
            lines.append(
                _line(
                    metric,
                    f"{what} fxmlir/Inductor cold, geomean over {len(comp)} model cases: "
                    f"{g:.3f} (1/{1 / g:.1f})" + _missing(missing),
                    f"<= {COMPILE_BAR} (1/10)",
                    None if not comp else g <= COMPILE_BAR and not missing,
                    g,
                )
            )
        matched = sum(ok(r.get("fxmlir")) for r in rows_of(results, "model", None))
        total = len(rows_of(results, "model", None))
        lines.append(
            _line(
                "correct",
                f"fxmlir matches eager on {matched} of {total} model cases",
                "all",
                matched == total,
                matched,
            )
        )
    gemms = rows_of(results, "gemm")
    if gemms:
        frac, missing = _ratios(gemms, lambda r: ratio(gflops(r, "fxmlir"), gflops(r, "eager")))
        low = min(frac, key=frac.get) if frac else None
        lines.append(
            _line(
                "gemm_fraction",
                f"GEMM f32 fxmlir/torch.mm: geomean {geomean(frac.values()):.0%}"
                + (f", min {frac[low]:.0%} ({low})" if low else "")
                + _missing(missing),
                f">= {GEMM_BAR:.0%} at every size",
                None if not frac else frac[low] >= GEMM_BAR and not missing,
                frac[low] if low else None,
            )
        )
    for row in rows_of(results, "bandwidth"):
        paired = row.get("paired") or {}
        fraction = ratio(paired.get("copy_ms"), paired.get("fxmlir_ms"))
        lines.append(
            _measured_line(
                f"bandwidth_{row['case']}",
                f"{row['case']} ({row['description']}): fxmlir ",
                fraction,
                lambda row=row, paired=paired, fraction=fraction: (
                    f"{row['bytes'] / paired['fxmlir_ms'] / 1e6:.1f} GB/s = {fraction:.0%} of "
                    f"the copy timed alternately with it "
                    f"({row['bytes'] / paired['copy_ms'] / 1e6:.1f} GB/s)"
                ),
                f">= {BANDWIDTH_BAR:.0%}",
                lambda v: v >= BANDWIDTH_BAR,
            )
        )
    overhead = results.get("overhead") or {}
    if "call_path_overhead_us" in overhead:
        path = overhead["call_path_overhead_us"]
        lines.append(
            _line(
                "call_overhead",
                f"call overhead beyond the kernel: fxmlir call path {path:.1f} µs; through "
                f"torch.compile {overhead['torch_compile_overhead_us']:.1f} µs (Dynamo's guards "
                f"included; Inductor's whole call, with aot_autograd's wrapper: "
                f"{overhead['torch_compile_inductor_us']:.1f} µs)",
                f"<= {OVERHEAD_BAR_US:.0f} µs for fxmlir's call path",
                path <= OVERHEAD_BAR_US,
                path,
            )
        )
    lines += real_summary(results)
    lines += shapes_summary(results)
    if lines and lines[0]["metric"] == "quiet_machine" and not lines[0]["met"]:
        for line in lines[1:]:
            line["text"] += " [unreliable: the machine was busy]"
    return lines


def _measured_line(
    metric: str,
    text: str,
    value: float | None,
    figure: Callable[[], str],
    bar: str,
    meets: Callable[[float], bool],
) -> dict:
    """A summary line whose figure may be missing: ``text`` then ``figure()`` (or "not
    measured"), met when ``meets(value)`` (unknown without a value)."""
    return _line(
        metric,
        text + (figure() if value is not None else "not measured"),
        bar,
        None if value is None else meets(value),
        value,
    )


def real_summary(results: dict[str, Any]) -> list[dict[str, Any]]:
    """The bars of the models at real sizes: the geomean and the worst of fxmlir/Inductor,
    ResNet-50's share of the FMA peak, and attention at 2,048 tokens against eager's
    ``scaled_dot_product_attention``."""
    rows = rows_of(results, "real")
    if not rows:
        return []
    run, missing = _ratios(rows, lambda r: ratio(timed(r, "fxmlir"), timed(r, "inductor")))
    lines = []
    if run:
        g = geomean(run.values())
        worst = max(run, key=run.get)
        lines += [
            _line(
                "real_geomean",
                f"real sizes: runtime fxmlir/Inductor, geomean over {len(run)} cases: {g:.2f}"
                + _missing(missing),
                f"<= {REAL_GEOMEAN_BAR}",
                g <= REAL_GEOMEAN_BAR and not missing,
                g,
            ),
            _line(
                "real_max",
                f"real sizes: runtime fxmlir/Inductor, max: {run[worst]:.2f} ({worst})",
                f"none above {REAL_MAX_BAR}",
                run[worst] <= REAL_MAX_BAR and not missing,
                run[worst],
            ),
        ]
    by_name = {r["case"]: r for r in rows}
    if "resnet50" in by_name:
        r = by_name["resnet50"]
        share = of_peak(r, "fxmlir")
        lines.append(
            _measured_line(
                "resnet50_peak",
                "ResNet-50 at 224: fxmlir ",
                share,
                lambda: (
                    f"{gflops(r, 'fxmlir'):.0f} GFLOP/s = {share:.0%} of the FMA peak "
                    f"measured with it ({r['peak_gflops']:.0f} GFLOP/s)"
                ),
                f">= {RESNET50_PEAK_BAR:.0%}",
                lambda v: v >= RESNET50_PEAK_BAR,
            )
        )
    if "attention_2048" in by_name:
        r = by_name["attention_2048"]
        against = ratio(timed(r, "fxmlir"), timed(r, "eager"))
        lines.append(
            _measured_line(
                "attention_2048",
                "attention at 2,048 tokens: fxmlir/eager scaled_dot_product_attention ",
                against,
                lambda: f"{against:.2f}",
                "< 1.0",
                lambda v: v < 1.0,
            )
        )
    return lines


def shapes_summary(results: dict[str, Any]) -> list[dict[str, Any]]:
    """The bars of the workloads whose shapes move: ``generate()``'s steady time per token and
    first round against Inductor's and its kernels per graph; the symbolic probe's kernels and
    their cost against kernels for one size; the encoder's passes against Inductor's and its
    kernels."""
    lines = []
    gen = results.get("generate") or {}
    for family in ("llama", "gpt2"):
        r = gen.get(family)
        if not r:
            continue
        fx, ind = r["fxmlir"], r["inductor"]
        steady = ratio(fx["ms_per_token"], ind["ms_per_token"])
        first = ratio(fx["first_round_ms"], ind["first_round_ms"])
        lines += [
            _line(
                f"generate_{family}_steady",
                f"generate() {family}: steady ms per token fxmlir/Inductor {steady:.2f}"
                + ("" if fx["same_tokens"] else " (tokens differ from eager's)"),
                "<= 1.0, tokens equal eager's",
                steady <= 1.0 and fx["same_tokens"],
                steady,
            ),
            _line(
                f"generate_{family}_first",
                f"generate() {family}: first round fxmlir/Inductor {first:.2f}",
                "<= 0.5",
                first <= 0.5,
                first,
            ),
            _line(
                f"generate_{family}_kernels",
                f"generate() {family}: {fx['kernels']} kernels for {fx['graphs']} graphs",
                "<= 2 per graph",
                fx["kernels"] <= 2 * fx["graphs"],
                fx["kernels"],
            ),
        ]
    sym = results.get("symbolic")
    if sym and "costs" in sym:
        fx = sym["fxmlir"]
        lines.append(
            _line(
                "symbolic",
                f"dynamic=True over {len(sym['batches'])} sizes: {fx['kernels']} kernel(s) "
                f"({'for every size' if fx['symbolic'] else 'per size'}), each call matching "
                f"eager; against a kernel for the size alone at most {100 * sym['cost']:+.1f}%",
                f"1 kernel, <= +{100 * SYMBOLIC_COST_BAR:.0f}%",
                fx["kernels"] == 1 and fx["symbolic"] and sym["cost"] <= SYMBOLIC_COST_BAR,
                sym["cost"],
            )
        )
    for key, model in (("batches", "BERT"), ("vision_batches", "ResNet-18")):
        probe = results.get(key)
        if not probe or "fxmlir" not in probe:
            continue
        fx, ind = probe["fxmlir"], probe["inductor"]
        passes = [ratio(fx[f"{p}_pass_ms"], ind[f"{p}_pass_ms"]) for p in ("first", "second")]
        lines.append(
            _line(
                key,
                f"{model} over batch sizes: fxmlir/Inductor first pass {passes[0]:.2f}, second "
                f"{passes[1]:.2f}, {fx['kernels']} kernels"
                + ("" if fx["ok"] else " (outputs differ from eager's)"),
                "both < 1.0, <= 2 kernels",
                max(passes) < 1.0 and fx["kernels"] <= 2 and fx["ok"],
                max(passes),
            )
        )
    mem = results.get("memory")
    if mem and "rss_mib" in mem:
        rss = mem["rss_mib"]
        full, last = rss[str(mem["full_after"])], rss[str(mem["graphs"])]
        lines.append(
            _line(
                "memory",
                f"RSS over {mem['graphs']} distinct graphs: {rss['100']:.0f} MiB after 100, "
                f"{full:.0f} after {mem['full_after']}, {last:.0f} after {mem['graphs']} "
                f"(at most {mem['kernels_kept']} kernels kept)",
                f"grows < {MEMORY_SLACK_MIB} MiB once {mem['kernels_kept']} kernels are kept",
                last - full < MEMORY_SLACK_MIB,
                last - full,
            )
        )
    return lines


#: The symbolic probe's bar: a kernel for every size at most this much slower than a kernel
#: for the size alone (issue 34: within 15%).
SYMBOLIC_COST_BAR = 0.15

#: The memory probe's bar: RSS read once more graphs than the kernels kept in memory have
#: compiled, and after the last, differ by less than this (allocator noise, not kernels).
MEMORY_SLACK_MIB = 16


# ---------------------------------------------------------------------------------------------
# Markdown


def fmt(value: float | None, spec: str = ".3f", suffix: str = "") -> str:
    return "—" if value is None else format(value, spec) + suffix


def table(header: list[str], rows: list[list[str]]) -> list[str]:
    if not rows:
        return ["Not run.", ""]
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return out + [""]


def status(row: dict[str, Any]) -> str:
    """Errors and mismatches of a row's backends, or ``yes``."""
    problems = []
    for backend in ("inductor", "fxmlir"):
        result = row.get(backend) or {}
        if "error" in result:
            problems.append(f"{LABELS[backend]}: {result['error']}")
        elif not result.get("check", {}).get("ok", False):
            check = result.get("check", {})
            detail = check.get("detail") or f"max abs error {check.get('max_abs_err', 0):.1e}"
            problems.append(f"{LABELS[backend]} differs from eager ({detail})")
    if "error" in row:
        problems.append(row["error"])
    return "; ".join(problems).replace("|", "\\|") or "yes"


def time_cell(row: dict[str, Any], backend: str) -> str:
    """The median in ms, with the fastest call when the timed calls spread widely."""
    result = row.get(backend) or {}
    cell = fmt(timed(row, backend))
    if result.get("iqr_rel", 0.0) > NOISY_IQR and timed(row, backend) is not None:
        cell += f" (min {result['min_ms']:.3f})"
    return cell


def model_table(results: dict[str, Any]) -> list[str]:
    rows = []
    for r in rows_of(results, "model", None):
        fx, ind, eager = timed(r, "fxmlir"), timed(r, "inductor"), timed(r, "eager")
        compile_record = (r.get("fxmlir") or {}).get("compile", {})
        compile_ms = compile_record.get("total_ms")
        waited_ms = compile_record.get("waited_ms") if compile_record.get("background_ms") else None
        rows.append(
            [
                label(r),
                time_cell(r, "eager"),
                time_cell(r, "inductor"),
                time_cell(r, "fxmlir"),
                fmt(ratio(fx, ind), ".2f"),
                fmt(ratio(fx, eager), ".2f"),
                fmt(first_call(r, "inductor"), ".0f"),
                fmt(first_call(r, "fxmlir"), ".0f"),
                fmt(ratio(first_call(r, "fxmlir"), first_call(r, "inductor")), ".3f"),
                fmt(backend_compile(r, "inductor"), ".0f"),
                fmt(backend_compile(r, "fxmlir"), ".0f"),
                fmt(compile_ms, ".0f"),
                fmt(waited_ms, ".0f"),
                fmt(ratio(backend_compile(r, "fxmlir"), backend_compile(r, "inductor")), ".3f"),
                status(r),
            ]
        )
    header = [
        "case",
        "eager ms",
        "Inductor ms",
        "fxmlir ms",
        "fxmlir/Inductor",
        "fxmlir/eager",
        "Inductor first call ms",
        "fxmlir first call ms",
        "first call fxmlir/Inductor",
        "Inductor backend ms",
        "fxmlir backend ms",
        "fxmlir compile ms",
        "fxmlir compile waited ms",
        "backend fxmlir/Inductor",
        "matches eager",
    ]
    notes = [
        "Backend ms: the backend's work on the first call: the ATen graph's capture (by "
        "aot_autograd or fxmlir's own trace) and the compiler; Dynamo's own tracing and guards "
        "are the rest. fxmlir compile ms: fxmlir's own stages, within it. They run on a thread "
        "of their own while Dynamo finishes (`config.background`); the backend time counts "
        "all of them, the first call only the part it waited for (waited ms).",
        "",
        f"A time followed by (min …) spread widely: the middle half of its calls covers more "
        f"than {NOISY_IQR:.0%} of the median.",
        "",
    ]
    return table(header, rows) + notes


def real_table(results: dict[str, Any]) -> list[str]:
    rows = []
    for r in rows_of(results, "real"):
        fx, ind = timed(r, "fxmlir"), timed(r, "inductor")
        rows.append(
            [label(r)]
            + [time_cell(r, b) for b in BACKENDS]
            + [fmt(ratio(fx, ind), ".2f"), fmt(r.get("flops", 0) / 1e9, ".2f")]
            + [fmt(gflops(r, b), ".0f") for b in BACKENDS]
            + [fmt(r.get("peak_gflops"), ".0f")]
            + [fmt(of_peak(r, b), ".0%") for b in ("inductor", "fxmlir")]
            + [fmt(first_call(r, b), ".0f") for b in ("inductor", "fxmlir")]
            + [status(r)]
        )
    header = (
        ["case"]
        + [f"{LABELS[b]} ms" for b in BACKENDS]
        + ["fxmlir/Inductor", "GFLOP per call"]
        + [f"{LABELS[b]} GFLOP/s" for b in BACKENDS]
        + ["FMA peak GFLOP/s", "Inductor of peak", "fxmlir of peak"]
        + ["Inductor first call ms", "fxmlir first call ms", "matches eager"]
    )
    notes = [
        "GFLOP per call: `torch.utils.flop_counter` on one eager call (products, convolutions, "
        "attention; 2 per multiply-add; `nn.MultiheadAttention`'s fused fast path off, whose op "
        "it does not count). FMA peak: `fxmlir.fma_peak()` in the same process, "
        "just after the timed calls (register FMAs on the target's widest vectors, every "
        "thread).",
        "",
    ]
    return table(header, rows) + notes


def layer_ms(row: dict[str, Any], backend: str) -> float | None:
    """A layer's median ms times how many of the model's layers it stands for."""
    ms = timed(row, backend)
    return None if ms is None else ms * row["count"]


def layers_table(results: dict[str, Any]) -> list[str]:
    r = results.get("layers")
    if (lines := not_measured(r, "per-layer probe")) is not None:
        return lines
    peak, layers = r["peak_gflops"], r["layers"]
    rows = [
        [row["layer"], str(row["count"]), fmt(row["flops"] / 1e9, ".3f")]
        + [fmt(gflops(row, b), ".0f") for b in BACKENDS]
        + [fmt(ratio(gflops(row, "fxmlir"), peak), ".0%")]
        + [fmt(ratio(timed(row, "fxmlir"), timed(row, "inductor")), ".2f")]
        + [fmt(layer_ms(row, b), ".2f") for b in ("inductor", "fxmlir")]
        + [status(row)]
        for row in layers
    ]
    header = ["layer", "count", "GFLOP per call"]
    header += [f"{LABELS[b]} GFLOP/s" for b in BACKENDS]
    header += ["fxmlir of peak", "fxmlir/Inductor", "Inductor ms × count", "fxmlir ms × count"]
    header += ["matches eager"]
    notes = [f"{r['model']}'s distinct convolutions, each compiled alone; peak {peak:.0f} GFLOP/s."]
    totals = {b: [layer_ms(row, b) for row in layers] for b in ("inductor", "fxmlir")}
    flops = sum(row["flops"] * row["count"] for row in layers)
    for b, times in totals.items():
        if None not in times:
            rate = flops / sum(times) / 1e6
            notes.append(
                f"{LABELS[b]}: {sum(times):.1f} ms over all {sum(row['count'] for row in layers)} "
                f"convolutions, {rate:.0f} GFLOP/s = {rate / peak:.0%} of the peak."
            )
    return table(header, rows) + [" ".join(notes), ""]


def gemm_table(results: dict[str, Any]) -> list[str]:
    rows = []
    for r in rows_of(results, "gemm", None):
        rows.append(
            [label(r), r["description"]]
            + [fmt(gflops(r, b), ".1f") for b in BACKENDS]
            + [fmt(ratio(gflops(r, "fxmlir"), gflops(r, "eager")), ".0%"), status(r)]
        )
    header = ["case", "shape", "torch.mm GFLOP/s", "Inductor GFLOP/s", "fxmlir GFLOP/s"]
    return table(header + ["fxmlir/torch.mm", "matches eager"], rows)


def bandwidth_table(results: dict[str, Any]) -> list[str]:
    probe = results.get("bandwidth") or {}
    measured = probe.get("copy_gbps")
    out = []
    if "error" in probe:
        out += [f"Bandwidth probe failed: {probe['error']}", ""]
    elif probe:
        out += [
            f"Measured bandwidth (`dst.copy_(src)`, 2 x 128 MiB read+written, torch threads: "
            f"{probe['threads']}): **{measured:.1f} GB/s**; on one thread "
            f"{probe['copy_1thread_gbps']:.1f} GB/s; `src.clone()` (a fresh 128 MiB output, "
            f"as every out-of-place op allocates) {probe['clone_gbps']:.1f} GB/s.",
            "",
        ]
    rows = []
    for r in rows_of(results, "bandwidth", None) + [
        r for r in rows_of(results, "model", None) if r.get("bytes")
    ]:
        rows.append(
            [label(r), r["description"]]
            + [
                f"{fmt(gbps(r, b), '.1f')} ({fmt(ratio(gbps(r, b), measured), '.0%')})"
                for b in BACKENDS
            ]
            + [status(r)]
        )
    header = ["case", "work"] + [f"{LABELS[b]} GB/s (of measured)" for b in BACKENDS]
    paired = [
        f"{r['case']}, timed alternately with the same copy ({r['paired']['rounds']} rounds; "
        f"the summary line's figure): copy {r['bytes'] / r['paired']['copy_ms'] / 1e6:.1f} GB/s, "
        f"fxmlir {r['bytes'] / r['paired']['fxmlir_ms'] / 1e6:.1f} GB/s "
        f"({r['paired']['copy_ms'] / r['paired']['fxmlir_ms']:.0%})."
        for r in rows_of(results, "bandwidth", None)
        if r.get("paired")
    ]
    return out + table(header + ["matches eager"], rows) + (["", *paired] if paired else [])


def not_measured(probe: dict[str, Any] | None, what: str) -> list[str] | None:
    """The lines that stand for a probe's table when it did not run or failed, else None."""
    if not probe:
        return ["Not run.", ""]
    if "error" in probe:
        return [f"The {what} failed: {probe['error']}", ""]
    return None


def overhead_table(results: dict[str, Any]) -> list[str]:
    o = results.get("overhead")
    if (lines := not_measured(o, "call overhead probe")) is not None:
        return lines
    kernel = o["kernel_us"]
    paths = [
        ("eager `x + 1`", o["eager_us"], None),
        ("fxmlir kernel alone (`Kernel.run` on prepared pointers)", kernel, None),
        ("fxmlir call path, no Dynamo (`fxmlir.compile_graph`)", o["call_path_us"], kernel),
        ('`torch.compile(backend="fxmlir")`', o["torch_compile_fxmlir_us"], kernel),
        ('`torch.compile(backend="inductor")`', o["torch_compile_inductor_us"], None),
    ]
    rows = [
        [name, fmt(us, ".2f"), fmt(us - base if base else None, ".2f")] for name, us, base in paths
    ]
    return table(["path", "µs per call", "beyond the fxmlir kernel µs"], rows)


def interleaved_table(results: dict[str, Any]) -> list[str]:
    r = results.get("interleaved")
    if (lines := not_measured(r, "interleaved probe")) is not None:
        return lines
    mm = r["eager_mm_ms"]
    rows = [
        [
            backend,
            fmt(r[backend]["alone_ms"], ".3f"),
            fmt(mm, ".3f"),
            fmt(r[backend]["with_mm_ms"], ".3f"),
            fmt(r[backend]["excess_ms"], ".3f"),
        ]
        for backend in ("inductor", "fxmlir")
    ]
    header = ["backend", "compiled MLP alone ms", f"eager mm {r['mm']}³ alone ms"]
    return table(header + ["both in turn ms", "excess ms"], rows)


def checks_table(results: dict[str, Any]) -> list[str]:
    r = results.get("checks")
    if (lines := not_measured(r, "checks probe")) is not None:
        return lines
    rows = [
        [
            name,
            fmt(r[name]["eager"], ".3f"),
            fmt(r[name]["checked"], ".3f"),
            fmt(r[name]["unchecked"], ".3f"),
            fmt(100 * r[name]["cost"], "+.1f"),
        ]
        for name in ("embedding", "int_division")
    ]
    header = ["case", "eager ms", "fxmlir checked ms", "fxmlir unchecked ms", "cost of checks %"]
    return table(header, rows)


def symbolic_table(results: dict[str, Any]) -> list[str]:
    r = results.get("symbolic")
    if (lines := not_measured(r, "symbolic probe")) is not None:
        return lines
    ms = r["ms"]
    kind = "for every size" if r["fxmlir"]["symbolic"] else "per size"
    rows = [
        [
            "first pass over the sizes ms",
            "—",
            fmt(r["inductor"]["first_pass_ms"], ".0f"),
            fmt(r["fxmlir"]["first_pass_ms"], ".0f"),
            "—",
        ],
        [
            "fxmlir graphs compiled",
            "—",
            "—",
            f"{r['fxmlir']['kernels']} ({kind})",
            str(r["fxmlir_static"]["kernels"]),
        ],
        [
            f"ms per call at batch {r['timed_batch']}",
            fmt(ms["eager"], ".3f"),
            fmt(ms["inductor"], ".3f"),
            fmt(ms["fxmlir"], ".3f"),
            fmt(ms["fxmlir_static"], ".3f"),
        ],
    ]
    header = ["", "eager", "Inductor dynamic", "fxmlir dynamic", "fxmlir for that size"]
    costs = ", ".join(
        f"{n} {100 * c['cost']:+.1f}% (spread {100 * c['iqr']:.1f})" for n, c in r["costs"].items()
    )
    note = (
        f"fxmlir's kernel for every size against a kernel for that size alone, by batch size "
        f"(median of paired rounds): {costs}."
    )
    return table(header, rows) + [note, ""]


def generate_table(results: dict[str, Any]) -> list[str]:
    r = results.get("generate")
    if (lines := not_measured(r, "generate probe")) is not None:
        return lines
    rows = []
    for family in ("llama", "gpt2"):
        for name in ("eager", "inductor", "fxmlir"):
            b = r[family][name]
            kernels = (
                f"{b['kernels']} for {b['graphs']} graphs ({b['symbolic']} for every size)"
                if "kernels" in b
                else "—"
            )
            rows.append(
                [
                    family,
                    name,
                    fmt(b["first_round_ms"], ".0f"),
                    fmt(b["ms_per_token"], ".2f"),
                    "yes" if b["same_tokens"] else "**no**",
                    kernels,
                ]
            )
    header = [
        "model",
        "backend",
        "first round ms",
        "steady ms per token",
        "tokens equal eager's",
        "fxmlir kernels",
    ]
    return table(header, rows)


def _per_backend(r: dict[str, Any], timings: Callable[[dict[str, Any]], list[str]]) -> list[list]:
    """A row per backend of a shapes probe's result ``r``: its name, its ``timings`` cells,
    whether it matched eager, and fxmlir's kernels."""
    rows = []
    for name in ("eager", "inductor", "fxmlir"):
        b = r[name]
        kernels = f"{b['kernels']} ({b['symbolic']} for every size)" if "kernels" in b else "—"
        rows.append([name, *timings(b), "yes" if b["ok"] else "**no**", kernels])
    return rows


def batches_table(results: dict[str, Any], key: str = "batches") -> list[str]:
    r = results.get(key)
    if (lines := not_measured(r, f"{key} probe")) is not None:
        return lines
    rows = _per_backend(
        r, lambda b: [fmt(b["first_pass_ms"], ".0f"), fmt(b["second_pass_ms"], ".0f")]
    )
    header = ["backend", "first pass ms", "second pass ms", "matches eager", "fxmlir kernels"]
    return table(header, rows) + [f"Batch sizes in order: {r['sizes']}.", ""]


def segmentation_table(results: dict[str, Any]) -> list[str]:
    r = results.get("segmentation")
    if (lines := not_measured(r, "segmentation probe")) is not None:
        return lines
    rows = _per_backend(
        r, lambda b: [fmt(b["first_round_ms"], ".0f"), *(fmt(t, ".1f") for t in b["ms"])]
    )
    fx, ind = r["fxmlir"]["ms"], r["inductor"]["ms"]
    per_size = ", ".join(
        f"{h}x{w} {ratio(f, i):.2f}" for (h, w), f, i in zip(r["sizes"], fx, ind, strict=True)
    )
    header = ["backend", "first round ms", *(f"{h}x{w} ms" for h, w in r["sizes"])]
    header += ["matches eager", "fxmlir kernels"]
    return table(header, rows) + [f"fxmlir/Inductor per size: {per_size}.", ""]


def memory_table(results: dict[str, Any]) -> list[str]:
    r = results.get("memory")
    if (lines := not_measured(r, "memory probe")) is not None:
        return lines
    rows = [[n, fmt(v, ".1f")] for n, v in r["rss_mib"].items()]
    return table(["graphs compiled", "RSS MiB"], rows) + [
        f"At most {r['kernels_kept']} kernels kept in memory; {r['seconds']:.0f} s in all.",
        "",
    ]


def cache_table(results: dict[str, Any]) -> list[str]:
    rows = []
    for c in results.get("cache", []):
        cells = [c["case"]]
        for run in ("cold", "warm"):
            r = c.get(run, {})
            comp = r.get("compile", {})
            sources = ", ".join(f"{n} {s}" for s, n in sorted(comp.get("sources", {}).items()))
            cells += [
                r.get("error") or fmt(r.get("first_call_ms"), ".0f"),
                fmt(comp.get("total_ms"), ".0f"),
                sources or "—",
            ]
        files = c.get("cold", {}).get("cache_dir", {})
        cells.append(f"{files.get('files', 0)} files, {files.get('bytes', 0) / 1e6:.1f} MB")
        rows.append(cells)
    header = ["case"]
    for run in ("cold", "warm"):
        header += [f"{run} first call ms", f"{run} fxmlir compile ms", f"{run} kernels"]
    return table(header + ["cache after cold run"], rows)


#: The ways the constants experiment passes weights, as the table names them.
VARIANTS = {
    "inputs": "weights as inputs",
    "hoisted": "weights as inputs, weight-only work hoisted (default)",
    "constants": "weights as constants",
}


def constants_table(results: dict[str, Any]) -> list[str]:
    rows = []
    for model, variants in (results.get("constants") or {}).items():
        if not isinstance(variants, dict):
            continue  # others_busy
        if "error" in variants:
            rows.append([model, "—", variants["error"]] + ["—"] * 6)
            continue
        for variant, label in VARIANTS.items():
            v = variants.get(variant)
            if v is None:
                continue
            rows.append(
                [
                    model,
                    label,
                    str(v["inputs"]),
                    str(v["constants"]),
                    f"{v['json_bytes'] / 1e3:.0f} kB",
                    fmt(v["compile_ms"], ".0f"),
                    fmt(v["ms"]),
                    "yes" if v["check"]["ok"] else f"NO ({v['check']})",
                ]
            )
    header = ["model", "variant", "inputs", "constants", "JSON", "compile ms", "run ms", "matches"]
    return table(header, rows)


def stages_table(results: dict[str, Any]) -> list[str]:
    models = [r for r in rows_of(results, "model", None) if (r.get("fxmlir") or {}).get("compile")]
    stages: list[str] = []
    for r in models:
        for s in r["fxmlir"]["compile"]["stages_ms"]:
            if s not in stages:
                stages.append(s)
    rows = []
    for r in models:
        comp = r["fxmlir"]["compile"]
        rows.append(
            [r["case"], str(len(comp["graphs"]))]
            + [fmt(comp["stages_ms"].get(s), ".1f") for s in stages]
            + [fmt(comp["total_ms"], ".1f")]
        )
    return table(["case", "graphs"] + stages + ["total"], rows)


def machine_line(meta: dict[str, Any]) -> str:
    return (
        f"{meta['date']}, {meta['cpu']} ({meta['cores']} cores), torch {meta['torch']} "
        f"(threads: {meta['threads']}), fxmlir {meta['fxmlir']} ({meta['commit']}), "
        f"Python {meta['python']}; fxmlir compiles for {meta.get('target', 'the host')}"
    )


def cpu_speed_lines(tasks: dict[str, Any]) -> list[str]:
    """How even the CPUs' speeds were over the run (each measured before each task), and the
    tasks that started on uneven ones."""
    speeds = {t: m["cpu_gflops"] for t, m in tasks.items() if m.get("cpu_gflops")}
    if not speeds:
        return []
    worst = min(speeds, key=lambda t: unevenness(speeds[t]))
    flagged = [t for t in speeds if is_uneven(speeds[t])]
    slowest = min(min(v) for v in speeds.values())
    fastest = max(max(v) for v in speeds.values())
    return [
        "CPU speeds (FMA GFLOP/s of one thread pinned to each CPU, before each task): "
        f"{slowest:.0f} to {fastest:.0f}; "
        f"most uneven before {worst} ("
        + ", ".join(f"{g:.0f}" for g in speeds[worst])
        + ")."
        + (
            f" **{len(flagged)} of {len(speeds)} tasks started on CPUs whose slowest ran below "
            f"{UNEVEN_THRESHOLD:.0%} of the fastest (marked {UNEVEN_MARK}): their two-thread "
            "figures depend on how each backend shares work between a fast and a slow CPU.**"
            if flagged
            else ""
        ),
        "",
    ]


def markdown(results: dict[str, Any]) -> str:
    meta = results["meta"]
    out = [f"Run of {machine_line(meta)}.", ""]
    tasks = meta.get("tasks") or {}
    if tasks:
        busy_tasks = [t for t, m in tasks.items() if m["others_busy"] > BUSY_THRESHOLD]
        worst = max(tasks, key=lambda t: tasks[t]["others_busy"])
        out += [
            f"Wall time {meta.get('wall_s', 0) / 60:.1f} min. Other processes used at most "
            f"{tasks[worst]['others_busy']:.0%} of the CPUs during a task ({worst})."
            + (
                f" **The machine was busy during {len(busy_tasks)} of {len(tasks)} tasks (marked "
                f"{BUSY_MARK}): their figures are unreliable.**"
                if busy_tasks
                else ""
            ),
            "",
        ]
        out += cpu_speed_lines(tasks)
    out += ["**Summary**", ""]
    out += [f"- {line['text']}" for line in results["summary"]] + [""]
    sections = [
        ("Models: median ms per call, first call ms (cold)", model_table),
        ("Models at real sizes: median ms per call, GFLOP/s against the FMA peak", real_table),
        ("ResNet-50 per layer: GFLOP/s of each convolution against the FMA peak", layers_table),
        ("GEMM f32: `a @ b`, a M×K, b K×N, 2·M·N·K flops", gemm_table),
        ("Memory bandwidth", bandwidth_table),
        ("Call overhead: `x + 1` on a one-element tensor", overhead_table),
        ("Compiled MLP and an eager `torch.mm` called in turn", interleaved_table),
        (
            "Run-time checks: embedding (50k x 256 table, 8k ids) and int64 `//` and `%` (1M)",
            checks_table,
        ),
        (
            "Symbolic sizes: layer norm, softmax and GELU on (n, 64, 256), n over ten sizes",
            symbolic_table,
        ),
        (
            "generate(): greedy, 48 new tokens from prompts of 5, 12 and 20 tokens, KV cache",
            generate_table,
        ),
        (
            "BERT encoder (d = 256, 4 layers, 64 tokens), batch sizes 1..32 in random order",
            batches_table,
        ),
        (
            "ResNet-18 at 160 x 160, batch sizes 1..16 in random order",
            lambda r: batches_table(r, "vision_batches"),
        ),
        (
            "Segmentation: LR-ASPP MobileNetV3-Large, batch 1, at three image sizes",
            segmentation_table,
        ),
        (
            "Resident memory over 1,000 distinct small graphs, one process, no disk cache",
            memory_table,
        ),
        ("Compile cache: FXMLIR_CACHE_DIR cold, then warm", cache_table),
        ("Weights as graph inputs, hoisted, or constants", constants_table),
        ("fxmlir compile stages, ms summed over a case's graphs", stages_table),
    ]
    for title, render in sections:
        out += [f"**{title}**", ""] + render(results)
    probes = (
        "layers",
        "bandwidth",
        "overhead",
        "interleaved",
        "checks",
        "symbolic",
        "generate",
        "batches",
        "vision_batches",
        "segmentation",
        "memory",
        "constants",
    )
    flagged = [k for k in probes if busy(results.get(k))]
    flagged += [f"cache {c['case']}" for c in results.get("cache", []) if busy(c.get("cold"))]
    flagged += [f"cache {c['case']}" for c in results.get("cache", []) if busy(c.get("warm"))]
    if flagged:
        out += [f"{BUSY_MARK}: measured while the machine was busy: {', '.join(flagged)}.", ""]
    skewed = [k for k in probes if uneven(results.get(k))]
    if skewed:
        out += [f"{UNEVEN_MARK}: started on CPUs of uneven speed: {', '.join(skewed)}.", ""]
    return "\n".join(out)


# ---------------------------------------------------------------------------------------------
# Chart


def chart(results: dict[str, Any], path: pathlib.Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter

    fig, axes = plt.subplots(2, 2, figsize=(14, 9))
    models = rows_of(results, "model", None)

    def bars(ax, rows, backends, value, ylabel, title, log=True):
        width = 0.8 / len(backends)
        for i, b in enumerate(backends):
            xs = [j + (i - (len(backends) - 1) / 2) * width for j in range(len(rows))]
            ys = [value(r, b) or 0.0 for r in rows]
            ax.bar(xs, ys, width, label=LABELS[b], color=COLORS[b])
        ax.set_xticks(range(len(rows)), [label(r) for r in rows], rotation=30, ha="right")
        ax.set_ylabel(ylabel)
        ax.set_title(title)
        if log:
            ax.set_yscale("log")
            ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
            # Label the 2s and 5s between the decades, not every minor tick.
            ax.yaxis.set_minor_formatter(
                FuncFormatter(lambda v, _: f"{v:g}" if f"{v:.0e}"[0] in "25" else "")
            )
        ax.legend()

    bars(
        axes[0][0],
        models,
        ("inductor", "fxmlir"),
        lambda r, b: ratio(timed(r, "eager"), timed(r, b)),
        "speed-up over eager (higher is faster)",
        "Model run time",
    )
    axes[0][0].axhline(1.0, color="grey", linewidth=0.8)
    bars(
        axes[0][1],
        models,
        ("inductor", "fxmlir"),
        first_call,
        "first call ms",
        "First call (compile), cold",
    )
    bars(
        axes[1][0],
        rows_of(results, "gemm", None),
        BACKENDS,
        gflops,
        "GFLOP/s",
        "GEMM f32",
        log=False,
    )
    rows = rows_of(results, "bandwidth", None) + [r for r in models if r.get("bytes")]
    bars(axes[1][1], rows, BACKENDS, gbps, "GB/s", "Elementwise throughput", log=False)
    measured = (results.get("bandwidth") or {}).get("copy_gbps")
    if measured:
        axes[1][1].axhline(measured, color="black", linestyle="--", linewidth=0.8)
        axes[1][1].annotate("measured bandwidth", (0, measured), va="bottom")
    fig.suptitle(f"fxmlir benchmarks: {machine_line(results['meta'])}", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def write(results: dict[str, Any], directory: pathlib.Path) -> str:
    """Adds the summary, writes results.json, results.md and results.png; returns the markdown."""
    results["summary"] = summary(results)
    directory.mkdir(exist_ok=True)
    (directory / "results.json").write_text(json.dumps(results, indent=1))
    text = markdown(results)
    (directory / "results.md").write_text(text)
    chart(results, directory / "results.png")
    return text


if __name__ == "__main__":
    source = pathlib.Path(sys.argv[1])
    print(write(json.loads(source.read_text()), source.parent))
