"""The comparison report: one self-contained HTML page over runs of several policies (and seeds).

Everything is inside the file: the style, the tables, and the plots as SVG
images in ``data:`` URIs (matplotlib; lines with many points are rasterised
inside the SVG so the file stays small), so it opens offline, by mail or from
an artifact store. The run folders it links to (per-job tables, timelines,
summaries) sit beside it.
"""

from __future__ import annotations

import base64
import datetime as dt
import html
import io
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import matplotlib
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from matplotlib.figure import Figure  # Figure without pyplot: no backend, no global figure registry

from halyard import __version__
from halyard.datamodel import ValidationError
from halyard.experiments.runs import RunResult

HOUR = 3600.0
RASTERISE_ABOVE = 2000  # points in one line; past this it goes into the SVG as an image
MAX_TENANTS = 25  # per-tenant rows shown (the tenants with most jobs)


@dataclass(frozen=True)
class Metric:
    key: str
    label: str
    unit: str  # "h", "%" or "" (a count)
    lower_is_better: bool = True


# The summary table's columns, in order (keys of halyard.controlplane.summarize).
METRICS = (
    Metric("avg_jct_s", "avg JCT", "h"),
    Metric("p50_jct_s", "median JCT", "h"),
    Metric("p95_jct_s", "p95 JCT", "h"),
    Metric("p99_jct_s", "p99 JCT", "h"),
    Metric("avg_queue_s", "avg queueing", "h"),
    Metric("p95_queue_s", "p95 queueing", "h"),
    Metric("makespan_s", "makespan", "h"),
    Metric("gpu_utilization", "GPU utilisation", "%", lower_is_better=False),
    Metric("comm_share", "exposed comm. share", "%"),
    Metric("preemptions", "preemptions", ""),
)


def policy_means(results: Sequence[RunResult]) -> dict[str, dict[str, float]]:
    """Per policy (in first-seen order), the mean over its seeds of every summary metric."""
    by_policy: dict[str, list[Mapping[str, Any]]] = {}
    for r in results:
        by_policy.setdefault(r.spec.policy, []).append(r.summary)
    keys = [m.key for m in METRICS] + ["completed", "jobs", "wall_s"]
    return {policy: {k: float(np.mean([float(s[k]) for s in runs])) for k in keys}
            for policy, runs in by_policy.items()}


def ratios(means: Mapping[str, Mapping[str, float]], baseline: str) -> dict[str, dict[str, float | None]]:
    """Each policy's metrics over the baseline's (None where the baseline's is 0)."""
    if baseline not in means:
        raise ValidationError(f"baseline {baseline!r} is not among the policies ({', '.join(means)})",
                              field="--baseline")
    base = means[baseline]
    return {policy: {m.key: (values[m.key] / base[m.key] if base[m.key] else None) for m in METRICS}
            for policy, values in means.items()}


def write_report(results: Sequence[RunResult], path: Path, *, baseline: str, command: str,
                 run_dirs: Mapping[str, str], run_commands: Mapping[str, str], table_format: str = "parquet",
                 title: str = "Halyard policy comparison", cluster_gpus: int | None = None) -> None:
    """Write the HTML report for ``results`` to ``path``.

    ``command`` made the whole report; ``run_commands`` maps each run's name to the
    command that reproduces it alone, ``run_dirs`` to its folder relative to the
    report (linked, with its tables in ``table_format``).
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render_report(results, baseline=baseline, command=command, run_dirs=run_dirs,
                                  run_commands=run_commands, table_format=table_format, title=title,
                                  cluster_gpus=cluster_gpus), encoding="utf-8")


def write_sweep_report(results: Sequence[RunResult], path: Path, *, runs_dir: Path, baseline: str, command: str,
                       table_format: str = "parquet", title: str = "Halyard policy comparison",
                       cluster_gpus: int | None = None) -> None:
    """:func:`write_report` for runs that :func:`halyard.experiments.runs.run_and_save` wrote under
    ``runs_dir``: links relative to the report, each run's command writing to its folder."""
    base = os.path.relpath(runs_dir, path.parent)
    write_report(results, path, baseline=baseline, command=command,
                 run_dirs={r.spec.name: f"{Path(base).as_posix()}/{r.spec.name}" for r in results},
                 run_commands={r.spec.name: r.spec.command(runs_dir / r.spec.name, table_format) for r in results},
                 table_format=table_format, title=title, cluster_gpus=cluster_gpus)


def render_report(results: Sequence[RunResult], *, baseline: str, command: str, run_dirs: Mapping[str, str],
                  run_commands: Mapping[str, str], table_format: str = "parquet",
                  title: str = "Halyard policy comparison", cluster_gpus: int | None = None) -> str:
    if not results:
        raise ValidationError("no runs to report on", field="--policies")
    means = policy_means(results)
    rel = ratios(means, baseline)
    policies = list(means)
    palette = matplotlib.colormaps["tab10"]
    colours = {p: palette(i % 10) for i, p in enumerate(policies)}
    first = results[0].summary
    seeds = sorted({r.spec.seed for r in results})
    generated = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    e = html.escape
    parts = [
        "<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{e(title)}</title>", f"<style>{_CSS}</style></head><body>",
        f"<h1>{e(title)}</h1>",
        '<table class="meta">',
        _meta_row("trace", f"<code>{e(str(first['trace']))}</code> ({int(first['jobs'])} jobs, "
                           f"format {e(str(first['trace_format']))})"),
        _meta_row("cluster", e(str(first["cluster"])) + (f" ({cluster_gpus} GPUs)" if cluster_gpus else "")),
        _meta_row("policies", e(", ".join(policies))),
        _meta_row("seeds", e(", ".join(map(str, seeds))) + (" (values are means over seeds)" if len(seeds) > 1
                                                                else "")),
        _meta_row("baseline", f"<b>{e(baseline)}</b>: ratios are a policy's value over the baseline's"),
        _meta_row("command", f"<code>{e(command)}</code>"),
        _meta_row("generated", f"{generated} by halyard {e(__version__)}"),
        "</table>",
        "<h2>Summary</h2>",
        _summary_table(means, rel, baseline),
        '<p class="note">Lower is better except GPU utilisation. JCT and queueing over completed jobs '
        "(within the <code>--measure</code> window if one was given); the ratio under each value is "
        "policy / baseline, green where the policy does better.</p>",
        "<h2>Job completion and queueing</h2>",
        _img(_cdf_figure(results, policies, colours), "CDFs of job completion time and queueing delay"),
        "<h2>Cluster over time</h2>",
        f'<p class="note">Seed {seeds[0]} of each policy; sampled after every event.</p>',
        _img(_timeline_figure(results, policies, colours, seeds[0]),
             "GPU utilisation, queue length and running jobs over time"),
        "<h2>Per tenant</h2>",
        _tenant_table(results, policies, baseline),
        "<h2>Runs</h2>",
        _runs_table(results, run_dirs, run_commands, table_format),
        "</body></html>",
    ]
    return "\n".join(parts) + "\n"


# ------------------------------------------------------------------ tables


def _meta_row(key: str, value_html: str) -> str:
    return f"<tr><th>{html.escape(key)}</th><td>{value_html}</td></tr>"


def _fmt(value: float, unit: str) -> str:
    if unit == "h":
        return f"{value / HOUR:.2f} h"
    if unit == "%":
        return f"{100 * value:.1f}%"
    return f"{value:g}"


def _ratio_cell(ratio: float | None, *, lower_is_better: bool, is_baseline: bool) -> str:
    if ratio is None:
        return '<span class="ratio">n/a</span>'
    better = ratio < 1.0 if lower_is_better else ratio > 1.0
    worse = ratio > 1.0 if lower_is_better else ratio < 1.0
    cls = "ratio" + ("" if is_baseline else " better" if better else " worse" if worse else "")
    return f'<span class="{cls}" data-ratio="{ratio:.6g}">{ratio:.3f}&times;</span>'


def _summary_table(means: Mapping[str, Mapping[str, float]], rel: Mapping[str, Mapping[str, float | None]],
                   baseline: str) -> str:
    head = "".join(f"<th>{html.escape(m.label)}</th>" for m in METRICS)
    rows = ['<div class="wide"><table class="summary"><thead><tr><th>policy</th><th>completed</th>'
            f"{head}</tr></thead><tbody>"]
    for policy, values in means.items():
        is_base = policy == baseline
        cells = "".join(
            f'<td data-metric="{m.key}" data-value="{values[m.key]:.9g}">{_fmt(values[m.key], m.unit)}<br>'
            f"{_ratio_cell(rel[policy][m.key], lower_is_better=m.lower_is_better, is_baseline=is_base)}</td>"
            for m in METRICS)
        mark = " (baseline)" if is_base else ""
        rows.append(f'<tr data-policy="{html.escape(policy)}"><th>{html.escape(policy)}{mark}</th>'
                    f"<td>{values['completed']:g} / {values['jobs']:g}</td>{cells}</tr>")
    rows.append("</tbody></table></div>")
    return "\n".join(rows)


def completed_jobs(table: pa.Table) -> pa.Table:
    """The rows the summary's JCT and queueing figures are over: completed, inside the measure window."""
    return table.filter(pc.and_(pc.equal(table["state"], "COMPLETED"), table["measured"]))


def _tenant_table(results: Sequence[RunResult], policies: list[str], baseline: str) -> str:
    per_policy: dict[str, dict[str, tuple[float, float, int]]] = {}
    counts: dict[str, float] = {}  # completed jobs per run (mean over seeds), the most of any policy
    for policy in policies:
        runs = [r for r in results if r.spec.policy == policy]
        done = pa.concat_tables([completed_jobs(r.tables.jobs) for r in runs])
        grouped = done.group_by("tenant").aggregate([("jct_s", "mean"), ("queue_s", "mean"), ("job_id", "count")])
        stats = {}
        for row in grouped.to_pylist():
            stats[row["tenant"]] = (row["jct_s_mean"], row["queue_s_mean"], row["job_id_count"])
            counts[row["tenant"]] = max(counts.get(row["tenant"], 0.0), row["job_id_count"] / len(runs))
        per_policy[policy] = stats
    tenants = sorted(counts, key=lambda t: (-counts[t], t))
    shown = tenants[:MAX_TENANTS]
    head = "".join(f'<th colspan="2">{html.escape(p)}</th>' for p in policies)
    sub = "<th>avg JCT</th><th>avg queueing</th>" * len(policies)
    rows = ['<div class="wide"><table class="tenants"><thead><tr><th rowspan="2">tenant</th>'
            '<th rowspan="2">completed jobs per run</th>'
            f"{head}</tr><tr>{sub}</tr></thead><tbody>"]
    for tenant in shown:
        base = per_policy[baseline].get(tenant)
        cells = []
        for policy in policies:
            got = per_policy[policy].get(tenant)
            if got is None:
                cells.append("<td>-</td><td>-</td>")
                continue
            ratio = got[0] / base[0] if base and base[0] else None
            cells.append(f"<td>{_fmt(got[0], 'h')}<br>"
                         f"{_ratio_cell(ratio, lower_is_better=True, is_baseline=policy == baseline)}</td>"
                         f"<td>{_fmt(got[1], 'h')}</td>")
        rows.append(f'<tr data-tenant="{html.escape(tenant)}"><th>{html.escape(tenant)}</th>'
                    f"<td>{counts[tenant]:g}</td>{''.join(cells)}</tr>")
    rows.append("</tbody></table></div>")
    if len(tenants) > len(shown):
        rows.append(f'<p class="note">{len(tenants) - len(shown)} smaller tenants not shown; '
                    "every job is in the runs' jobs tables.</p>")
    return "\n".join(rows)


def _runs_table(results: Sequence[RunResult], run_dirs: Mapping[str, str], run_commands: Mapping[str, str],
                table_format: str) -> str:
    rows = ['<table class="runs"><thead><tr><th>run</th><th>avg JCT</th><th>wall</th><th>files</th>'
            "<th>exact command</th></tr></thead><tbody>"]
    for r in results:
        s = r.summary
        folder = run_dirs.get(r.spec.name)
        links = "" if folder is None else " ".join(
            f'<a href="{html.escape(folder)}/{name}">{name}</a>'
            for name in ("summary.json", f"jobs.{table_format}", f"timeline.{table_format}"))
        command = run_commands.get(r.spec.name) or r.spec.command()
        rows.append(f'<tr data-run="{html.escape(r.spec.name)}"><th>{html.escape(r.spec.name)}</th>'
                    f"<td>{_fmt(float(s['avg_jct_s']), 'h')}</td><td>{float(s['wall_s']):.1f} s</td>"
                    f"<td>{links}</td><td><code>{html.escape(command)}</code></td></tr>")
    rows.append("</tbody></table>")
    return "\n".join(rows)


# ------------------------------------------------------------------ plots


def _img(svg: bytes, alt: str) -> str:
    data = base64.b64encode(svg).decode("ascii")
    return f'<img class="plot" alt="{html.escape(alt)}" src="data:image/svg+xml;base64,{data}">'


def _svg(fig: Figure) -> bytes:
    buffer = io.BytesIO()
    # Text stays text (small, selectable); a fixed salt keeps element ids the same from run to run.
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": "halyard"}):
        fig.savefig(buffer, format="svg", metadata={"Date": None})
    return buffer.getvalue()


def _cdf(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    x = np.sort(values)
    return x, np.arange(1, x.size + 1) / x.size


def _cdf_figure(results: Sequence[RunResult], policies: list[str], colours: Mapping[str, Any]) -> bytes:
    fig = Figure(figsize=(11, 4), layout="constrained")
    jct_ax, queue_ax = fig.subplots(1, 2)
    for policy in policies:
        done = pa.concat_tables([completed_jobs(r.tables.jobs) for r in results if r.spec.policy == policy])
        for ax, column in ((jct_ax, "jct_s"), (queue_ax, "queue_s")):
            values = done[column].to_numpy(zero_copy_only=False).astype(float) / HOUR
            if values.size:
                x, y = _cdf(values)
                ax.step(x, y, where="post", label=policy, color=colours[policy],
                        rasterized=x.size > RASTERISE_ABOVE)
    jct_ax.set_xscale("log")
    jct_ax.set_xlabel("job completion time (h, log scale)")
    queue_ax.set_xscale("symlog", linthresh=0.1)
    queue_ax.set_xlabel("queueing delay (h; linear below 0.1 h, log above)")
    for ax, name in ((jct_ax, "JCT"), (queue_ax, "queueing delay")):
        ax.set_ylabel("fraction of completed jobs")
        ax.set_ylim(0, 1.01)
        ax.set_title(f"CDF of {name}")
        ax.grid(alpha=0.3)
    jct_ax.legend(fontsize=8)
    return _svg(fig)


def _timeline_figure(results: Sequence[RunResult], policies: list[str], colours: Mapping[str, Any],
                     seed: int) -> bytes:
    panels = (("gpu_util", "GPU utilisation (%)", 100.0), ("cpu_util", "CPU utilisation (%)", 100.0),
              ("queued", "jobs queued", 1.0), ("running", "jobs running", 1.0))
    fig = Figure(figsize=(11, 9), layout="constrained")
    axes = fig.subplots(len(panels), 1, sharex=True)
    for policy in policies:
        run = next((r for r in results if r.spec.policy == policy and r.spec.seed == seed), None)
        if run is None:
            continue
        timeline = run.tables.timeline
        t = timeline["time_s"].to_numpy() / HOUR
        for ax, (column, _, scale) in zip(axes, panels, strict=True):
            ax.step(t, timeline[column].to_numpy() * scale, where="post", label=policy, color=colours[policy],
                    linewidth=1.0, rasterized=t.size > RASTERISE_ABOVE)
    for ax, (_, label, _) in zip(axes, panels, strict=True):
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
    axes[0].set_ylim(0, 101)
    axes[1].set_ylim(0, 101)
    axes[-1].set_xlabel("cluster time (h)")
    axes[0].legend(fontsize=8, ncol=min(len(policies), 5))
    return _svg(fig)


_CSS = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 2em auto; max-width: 1200px; color: #222; padding: 0 1em; }
h1 { font-size: 1.6em; } h2 { font-size: 1.25em; margin-top: 1.6em; border-bottom: 1px solid #ddd; }
table { border-collapse: collapse; margin: 0.5em 0; }
th, td { padding: 4px 8px; border: 1px solid #ddd; text-align: right; vertical-align: top; white-space: nowrap; }
thead th, td:last-child { white-space: normal; } table.runs th { text-align: left; }
div.wide { overflow-x: auto; }
th { background: #f6f6f6; } table.meta th, table.meta td, table.runs td { text-align: left; }
table.meta th { width: 7em; }
.ratio { font-size: 0.85em; color: #666; } .better { color: #17803d; font-weight: 600; }
.worse { color: #b42318; font-weight: 600; }
.note { color: #555; font-size: 0.9em; }
code { font: 12px ui-monospace, monospace; background: #f3f3f3; padding: 1px 3px; word-break: break-all; }
img.plot { max-width: 100%; display: block; margin: 0.5em 0; }
"""
