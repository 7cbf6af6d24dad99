"""The per-job join that the side-by-side harnesses share (``*_public_perjob.py``).

A run is ``{"jobs": {job id: {"submit": s, "end": s or None}}, "cpu_s": s}``, whichever simulator made it,
so the public simulator's run and Halyard's are summarised by the same code.
"""

from __future__ import annotations

import itertools
import json
import math
import resource
import shlex
import subprocess
import time


def jcts(run: dict) -> dict[str, float]:
    """Each finished job's completion time (end - submit), by job id."""
    return {k: v["end"] - v["submit"] for k, v in run["jobs"].items() if v["end"] is not None}


def p99(xs: list[float]) -> float:
    """The 99th percentile by the nearest-rank rule."""
    s = sorted(xs)
    return s[min(len(s) - 1, math.ceil(0.99 * len(s)) - 1)]


def stats(run: dict) -> dict:
    """Jobs finished, mean and p99 JCT, makespan (first submission to last end) and CPU seconds."""
    j = jcts(run)
    ends = [v["end"] for v in run["jobs"].values() if v["end"] is not None]
    return {"jobs": len(j), "mean_jct_s": sum(j.values()) / len(j), "p99_jct_s": p99(list(j.values())),
            "makespan_s": max(ends) - min(v["submit"] for v in run["jobs"].values()), "cpu_s": run["cpu_s"]}


def agree(public: dict, ours: dict, tolerance: float = 0.05) -> float:
    """The fraction of the jobs both runs finished whose JCTs are within ``tolerance`` of the public one."""
    jp, jh = jcts(public), jcts(ours)
    both = set(jp) & set(jh)
    return sum(abs(jh[k] - jp[k]) <= tolerance * jp[k] for k in both) / max(1, len(both))


def common(public: dict, ours: dict) -> tuple[dict, dict]:
    """Both runs restricted to the jobs both finished, so that their means cover the same jobs (a job one
    side failed or never finished is reported apart)."""
    both = set(jcts(public)) & set(jcts(ours))
    return ({**public, "jobs": {k: v for k, v in public["jobs"].items() if k in both}},
            {**ours, "jobs": {k: v for k, v in ours["jobs"].items() if k in both}})


def hours(s: float) -> str:
    """Seconds as hours with two decimals, as the pages print them."""
    return f"{s / 3600:.2f}"


def child_cpu() -> float:
    """CPU seconds of this process's finished children (getrusage): both simulators run as children."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def ladder(base: str, steps: dict[str, str]) -> list[str]:
    """``base`` and its cumulative variants ``base+step1``, ``base+step1+step2``, ... (each harness's STEPS)."""
    names = list(steps)
    return ["+".join((base, *names[:k])) for k in range(len(names) + 1)]


def simulated(name: str, sim, jobs: list) -> dict:  # sim: halyard.scheduling.Simulator
    """Run ``jobs`` through ``sim``: the per-job submit, end and preemptions a Halyard side prints as JSON, with the
    simulation's own CPU seconds."""
    began = time.process_time()
    sim.run(jobs)
    cpu = time.process_time() - began
    return {"policy": name, "sim_cpu_s": cpu,
            "jobs": {r.spec.job_id: {"submit": r.spec.submit_time, "end": r.end_time,
                                     "preempt": getattr(r, "preemptions", 0)}
                     for r in sim.core.records.values()}}


def child(command: list[str]) -> dict:
    """A side's run in a child process: its JSON, with the child's CPU seconds (getrusage) and wall time."""
    before, began = child_cpu(), time.monotonic()
    out = subprocess.run(command, capture_output=True, text=True, check=False)
    cpu, wall = child_cpu() - before, time.monotonic() - began
    if out.returncode != 0:
        raise SystemExit(f"{shlex.join(command[:3])} failed:\n{out.stderr[-3000:]}")
    return {**json.loads(out.stdout.strip().splitlines()[-1]), "cpu_s": cpu, "wall_s": wall}


def named_steps(name: str, known: tuple[str, ...] | list[str] | dict) -> list[str]:
    """``preset+step+step`` -> its steps, each one of ``known`` (else a one-line exit naming the unknown)."""
    _, *steps = name.split("+")
    unknown = set(steps) - set(known)
    if unknown:
        raise SystemExit(f"unknown steps {sorted(unknown)}; known: {', '.join(known)}")
    return steps


def catalog_for(steps: list[str]):  # -> halyard.emulator.catalog.Catalog
    """The model catalog, with restarts free (no fixed restart cost, no checkpoint state) under ``free-restarts``:
    the step that removes Halyard's restart cost where a public simulator charges none."""
    import dataclasses

    from halyard.emulator.catalog import load_catalog

    catalog = load_catalog()
    if "free-restarts" in steps:
        catalog = dataclasses.replace(catalog, constants=dataclasses.replace(
            catalog.constants, restart_fixed_s=0.0, checkpoint_state_factor=0.0))
    return catalog


def ladder_table(data: dict, names: list[str], public_label: str) -> str:
    """Each Halyard run (``names``, in ladder order) against the public one, over the jobs both finished."""
    pub = data["public"]
    lines = ["| run | jobs done | mean JCT (h) | / public | p99 JCT (h) | / public | makespan (h) | / public "
             "| jobs within 5 % | CPU s (child) |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    sp0 = stats(pub)
    lines.append(f"| {public_label} | {sp0['jobs']} of {len(pub['jobs'])} "
                 f"| {hours(sp0['mean_jct_s'])} | 1.000 | {hours(sp0['p99_jct_s'])} | 1.000 "
                 f"| {hours(sp0['makespan_s'])} | 1.000 | 100% | {sp0['cpu_s']:.2f} |")
    for v in names:
        run = data["halyard"][v]
        p, h = common(pub, run)
        sp, s = stats(p), stats(h)
        lines.append(f"| Halyard `{v}` | {len(jcts(run))} of {len(run['jobs'])} | {hours(s['mean_jct_s'])} "
                     f"| {s['mean_jct_s'] / sp['mean_jct_s']:.3f} | {hours(s['p99_jct_s'])} "
                     f"| {s['p99_jct_s'] / sp['p99_jct_s']:.3f} | {hours(s['makespan_s'])} "
                     f"| {s['makespan_s'] / sp['makespan_s']:.3f} | {agree(pub, run):.0%} | {s['cpu_s']:.2f} |")
    return "\n".join(lines) + "\n"


def steps_table(data: dict, names: list[str], steps: dict[str, str]) -> str:
    """Each step of the ladder on its own: the run with it over the run without, on the jobs both finished."""
    lines = ["| step | what it changes | mean JCT, with / without | makespan, with / without "
             "| jobs within 5 % of public, without -> with |", "|---|---|---:|---:|---|"]
    pub = data["public"]
    for before, after in itertools.pairwise(names):
        a, b = common(pub, data["halyard"][before])[1], common(pub, data["halyard"][after])[1]
        sa, sb = stats(a), stats(b)
        step = after.rsplit("+", 1)[1]
        lines.append(f"| `{step}` | {steps[step]} | {sb['mean_jct_s'] / sa['mean_jct_s']:.3f} "
                     f"| {sb['makespan_s'] / sa['makespan_s']:.3f} | {agree(pub, a):.0%} -> {agree(pub, b):.0%} |")
    return "\n".join(lines) + "\n"
