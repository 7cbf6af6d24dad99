"""Every preset on the whole 82,247-job Philly trace compressed 8x (issue 38, Deliver 4): CPU, work, memory.

Each preset runs in a child process of its own (``whole_trace.py child PRESET``), one at a time, so
its peak memory is that child's alone: ``getrusage`` of the child as ``os.wait4`` reports it
(``ru_maxrss``, KiB on Linux), which includes starting Python and reading the trace. The child
reports the simulation's CPU seconds (``time.process_time`` around ``Simulator.run``; the trace read
and the policy's construction are outside it), the passes, the p50/p99 pass wall time (the core's
:class:`~halyard.scheduling.passtimes.PassTimes`) and the operation counts of
``benchmarks/opcounts.py`` (its wrappers cost a few percent of CPU; they are on in every row alike).

A preset gets ``--cpu-limit`` CPU seconds (``RLIMIT_CPU``: the kernel's SIGXCPU, so a busy shared
machine does not cut a run short the way a wall-clock limit would) and, as a backstop,
``--wall-limit`` seconds of wall time (SIGTERM). Either way the child stops the simulation where it
is and reports what it did so far, and its row says so: passes done, cluster time reached, jobs
ended; never an extrapolation.

    nice -n 10 .venv/bin/python benchmarks/whole_trace.py run [--presets fifo,las] [--cpu-limit 1200] \
        [--json docs/reproductions/whole-trace.json]
    .venv/bin/python benchmarks/whole_trace.py render    # docs/reproductions/whole-trace.md from the JSON alone

``run`` merges its rows into the JSON (a preset measured again replaces its row), so the table can be
grown a few presets at a time on a shared machine; the page lists the presets not yet measured.
``tests/test_reproduction_pages.py`` fails when the committed page differs from its rendering.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import platform
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGE_NAME = "whole-trace.md"
JSON_NAME = "whole-trace.json"
TRACE = ROOT.parent / "shared" / "traces" / "philly_pollux_jobs_full.csv"
TRACE_JOBS = 82_247  # rows of philly_pollux_jobs_full.csv (shared/traces/README.md)
CLUSTER = "philly"  # the 2,816-GPU Philly cluster
COMPRESS = 8.0  # submit times / 8: at its real rate Philly loads the cluster to ~13% and nothing waits
CONTENTION = "fair"
CPU_LIMIT_S = 1200  # per preset (issue 38's brief: a preset past it gets a row saying so)


class _Stopped(Exception):
    """Raised in the child by SIGXCPU (CPU limit) or SIGTERM (wall limit)."""


def child(preset: str, cpu_limit: int) -> dict[str, object]:
    """Simulate ``preset`` on the whole trace in this process; what it did (all of it, or up to the limit)."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from opcounts import add_core, counting

    from halyard.datamodel import load_cluster
    from halyard.policies import make_policy
    from halyard.scheduling import Simulator, summarize
    from halyard.scheduling.timing import performance_model_for
    from halyard.traces import read_trace

    jobs = [dataclasses.replace(j, submit_time=j.submit_time / COMPRESS) for j in read_trace(TRACE).jobs]
    policy = make_policy(preset)
    sim = Simulator(load_cluster(CLUSTER), policy, performance_model_for(policy, contention=CONTENTION))
    stopped: list[str] = []

    def stop(signum: int, _frame: object) -> None:
        stopped.append("cpu" if signum == signal.SIGXCPU else "wall")
        raise _Stopped

    signal.signal(signal.SIGXCPU, stop)
    signal.signal(signal.SIGTERM, stop)
    used = resource.getrusage(resource.RUSAGE_SELF)
    # The soft limit counts from the process's start: give the simulation cpu_limit seconds of its own.
    budget = int(used.ru_utime + used.ru_stime) + cpu_limit
    resource.setrlimit(resource.RLIMIT_CPU, (budget, budget + 60))
    with counting(policy) as counts:
        cpu0 = time.process_time()
        with contextlib.suppress(_Stopped):  # the run stops where the limit found it; its row says so
            sim.run(jobs)
        cpu = time.process_time() - cpu0
    signal.signal(signal.SIGXCPU, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    add_core(counts, sim.core)
    latency = sim.core.pass_seconds.latency_ms()
    ended = sum(1 for r in sim.core.records.values() if r.state.terminal)
    reached = 0.0
    for event in sim.core.log:  # the cluster time the run reached: its last event's
        reached = event.time
    out: dict[str, object] = {
        "preset": preset, "finished": not stopped, "stopped_by": stopped[0] if stopped else None,
        "cpu_s": round(cpu, 2), "passes": sim.core.passes, "p50_pass_ms": round(latency["p50_pass_ms"], 3),
        "p99_pass_ms": round(latency["p99_pass_ms"], 3), "max_pass_ms": round(latency["max_pass_ms"], 1),
        "jobs_ended": ended, "cluster_time_h": round(reached / 3600.0, 1),
        "counts": dict(counts)}
    if not stopped:
        s = summarize(sim.core, policy=preset, trace_jobs=len(jobs), rejected=0, wall_s=0.0)
        out["completed"] = s["completed"]
        out["avg_jct_h"] = round(s["avg_jct_s"] / 3600.0, 2)
    return out


def measure(preset: str, cpu_limit: int, wall_limit: int) -> dict[str, object]:
    """Run :func:`child` for ``preset`` in a process of its own; its row, with the child's peak memory."""
    proc = subprocess.Popen([sys.executable, __file__, "child", preset, "--cpu-limit", str(cpu_limit)],
                            stdout=subprocess.PIPE, cwd=ROOT)
    deadline = time.monotonic() + wall_limit
    while True:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            break
        if time.monotonic() > deadline:
            proc.send_signal(signal.SIGTERM)
            deadline = float("inf")
        time.sleep(1.0)
    assert proc.stdout is not None
    text = proc.stdout.read().decode()
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0 or not text.strip():
        return {"preset": preset, "finished": False, "stopped_by": f"exit {proc.returncode}",
                "peak_rss_mib": round(usage.ru_maxrss / 1024.0, 1)}
    row = json.loads(text.strip().splitlines()[-1])
    row["peak_rss_mib"] = round(usage.ru_maxrss / 1024.0, 1)
    row["process_cpu_s"] = round(usage.ru_utime + usage.ru_stime, 2)
    return row


def run(presets: list[str], cpu_limit: int, wall_limit: int, path: Path) -> None:
    stored = json.loads(path.read_text(encoding="utf-8")) if path.exists() else {"rows": {}}
    stored.update({"trace": TRACE.name, "trace_jobs": TRACE_JOBS, "cluster": CLUSTER, "compress": COMPRESS,
                   "contention": CONTENTION,
                   "command": f"nice -n 10 .venv/bin/python benchmarks/whole_trace.py run --presets P "
                              f"--cpu-limit {cpu_limit} --json docs/reproductions/{JSON_NAME}"})
    for preset in presets:
        t0 = time.monotonic()
        row = measure(preset, cpu_limit, wall_limit)
        row["wall_s"] = round(time.monotonic() - t0, 1)
        row["cpu_limit_s"] = cpu_limit
        row["machine"] = f"{platform.machine()}, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f} at the end"
        stored["rows"][preset] = row
        path.write_text(json.dumps(stored, indent=1, sort_keys=True) + "\n", encoding="utf-8")
        print(json.dumps(row), flush=True)


def _cell(row: dict, key: str, fmt: str) -> str:
    value = row.get(key)
    return "—" if value is None else format(value, fmt)


def table(stored: dict) -> str:
    lines = ["| preset | result | CPU s | passes | CPU ms per pass | p50 pass ms | p99 pass ms | peak memory MiB "
             "| jobs keyed per pass | link settles / states solved | victims built |",
             "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: |"]
    for preset, row in sorted(stored["rows"].items()):
        counts = row.get("counts", {})
        if row.get("finished"):
            result = f"all {row['completed']:,} completed, mean JCT {row['avg_jct_h']:.2f} h"
        elif "passes" in row:
            limit = (f"the CPU limit ({row['cpu_limit_s']:,} s)" if row["stopped_by"] == "cpu"
                     else f"the wall-clock limit (after {row['wall_s']:,.0f} s)")
            result = (f"**stopped at {limit}**: {row['jobs_ended']:,} of {stored['trace_jobs']:,} jobs ended "
                      f"by cluster hour {row['cluster_time_h']:,}")
        else:
            result = f"**failed** ({row['stopped_by']})"
        ranked = counts.get("keyed", 0)
        per_pass = f"{ranked / row['passes']:.1f}" if ranked and row.get("passes") else "—"
        links = (f"{counts['settles']:,} / {counts['links_solved']:,}" if counts.get("settles") else "—")
        per = f"{1e3 * row['cpu_s'] / row['passes']:.2f}" if row.get("passes") else "—"
        lines.append(f"| `{preset}` | {result} | {_cell(row, 'cpu_s', '.1f')} | {_cell(row, 'passes', ',')} | {per} "
                     f"| {_cell(row, 'p50_pass_ms', '.2f')} | {_cell(row, 'p99_pass_ms', '.2f')} "
                     f"| {_cell(row, 'peak_rss_mib', ',.0f')} | {per_pass} | {links} "
                     f"| {format(counts['victims'], ',') if counts.get('victims') else '—'} |")
    return "\n".join(lines) + "\n"


def missing(stored: dict) -> str:
    from halyard.policies import policy_names

    left = [name for name in policy_names() if name not in stored["rows"]]
    if not left:
        return "Every preset has a row.\n"
    return (f"Not measured yet ({len(left)} of {len(policy_names())} presets): "
            + ", ".join(f"`{name}`" for name in left) + ".\n")


def pages(docs: Path) -> dict[Path, str]:
    """The page's generated blocks from ``docs/reproductions/whole-trace.json`` (no simulation)."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        from reproduce_easyscale import filled
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    stored = json.loads((docs / JSON_NAME).read_text(encoding="utf-8"))
    return {docs / PAGE_NAME: filled(docs / PAGE_NAME, {"table": table(stored), "missing": missing(stored)})}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run", help="measure presets, one child process each, and merge them into the JSON")
    r.add_argument("--presets", help="comma-separated presets (default: every preset)")
    r.add_argument("--cpu-limit", type=int, default=CPU_LIMIT_S, help="CPU seconds per preset's simulation")
    r.add_argument("--wall-limit", type=int, default=None, help="wall seconds per preset (default 3x the CPU)")
    r.add_argument("--json", type=Path, default=ROOT / "docs" / "reproductions" / JSON_NAME)
    c = sub.add_parser("child", help="(internal) simulate one preset in this process and print its row")
    c.add_argument("preset")
    c.add_argument("--cpu-limit", type=int, default=CPU_LIMIT_S)
    sub.add_parser("render", help=f"rewrite docs/reproductions/{PAGE_NAME} from docs/reproductions/{JSON_NAME}")
    args = ap.parse_args()
    if args.command == "child":
        print(json.dumps(child(args.preset, args.cpu_limit)), flush=True)
    elif args.command == "run":
        from halyard.policies import policy_names

        presets = args.presets.split(",") if args.presets else policy_names()
        run(presets, args.cpu_limit, args.wall_limit or 3 * args.cpu_limit, args.json)
    else:
        for path, text in pages(ROOT / "docs" / "reproductions").items():
            path.write_text(text, encoding="utf-8")
            print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
