"""How far off are start forecasts? A loaded Philly slice, forecast every N cluster minutes (docs/forecast.md).

Replays ``--jobs`` jobs of the processed Philly trace from position ``--skip``, submit times divided by
``--compress``, and every ``--every-min`` cluster minutes
forecasts every waiting job's start; once the run has ended it compares each forecast with the job's
actual first start (jobs that had not started yet at the forecast) and prints the median and p90
absolute error, in hours, over every forecast and over each job's first forecast after its submission.

Two drivers (``--via``):

* ``simulate``: the simulator on ``--cluster`` (default ``philly``). Between two passes it forks the
  run and runs the same forward loop the control plane runs (controlplane/forecast.py), with no
  arrivals and, with ``--samples K``, as the median of K sampled-arrival runs.
* ``replay``: ``halyard replay``'s real control plane, real gRPC and one emulated agent per node, in
  lockstep on an accelerated clock (``--speedup``), on ``--cluster`` (default ``default``, 64 GPUs,
  so that a slice of a few hundred jobs queues). The control plane makes its own forecasts
  (``--forecast-samples K``); at each checkpoint the benchmark asks it for a fresh one and reads every
  waiting job's ``Job.forecast`` over gRPC (ListJobs): ``expected_start`` (no arrivals) and, with
  K > 0, ``start_p50`` (the median of the K sampled-arrival runs, which stop once every present job
  has started: only starts are scored). The actual first starts are the
  control plane's. Once every job of the slice has started, the jobs not ended yet (running, or
  preempted and waiting again) are cancelled over gRPC (their first starts are all known: nothing is
  left to score), which ends the replay early.
  ``--write`` stores the figures in docs/forecast.json and renders them into docs/forecast.md's
  generated block (tests/test_reproduction_pages.py checks the two agree).

Regenerate the page's replay block with

    nice -n 10 .venv/bin/python benchmarks/forecast_accuracy.py --via replay --skip 30000 --jobs 300 \
        --compress 2 --every-min 120 --samples 4 --speedup 2000 \
        --policies fifo,tiresias,dally-literal,synergy-tune:fifo,crius --write

A checkpoint comes when the clock reaches it and the previous forecast is in (forecasts are made one
at a time): on a busy machine checkpoints can come further apart than ``--every-min``; their count is
printed and stored. In lockstep the forecaster snapshots the instant the core has reached
(:meth:`~halyard.controlplane.forecast.Forecaster.instant`), so a clock that ran ahead does not
show up as error.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import shlex
import sys
import time
from pathlib import Path

import numpy as np

from halyard.clock import ScaledClock
from halyard.controlplane.forecast import (
    ForecastSettings,
    in_fork,
    run_forward,
    sampled_runs,
)
from halyard.controlplane.server import ControlPlaneServer
from halyard.datamodel import load_cluster, parse_cluster
from halyard.datamodel.cluster_toml import read_cluster_text
from halyard.experiments.replay import replay
from halyard.policies import make_policy
from halyard.scheduling import Simulator
from halyard.traces import read_trace
from halyard.v1 import job_service_pb2 as jpb
from halyard.v1 import job_service_pb2_grpc as jgrpc
from halyard.v1 import types_pb2 as tpb

ROOT = Path(__file__).resolve().parents[1]
PHILLY_FULL = ROOT.parent / "shared" / "traces" / "philly_pollux_jobs_full.csv"
STORED = "forecast.json"  # docs/: the replay figures; docs/forecast.md's generated block renders them
PAGE = "forecast.md"
HOUR = 3600.0
KEYS = ("first", "all", "first_sampled", "all_sampled", "lead")


def measure(policy_name: str, jobs: list, every_s: float, samples: int, cluster_name: str = "philly"
            ) -> dict[str, list[float]]:
    """Absolute start errors, cluster seconds: ``all``/``first`` with no arrivals, ``all_sampled``/``first_sampled``;
    ``lead``: how long after each forecast the job really started."""
    sim = Simulator(load_cluster(cluster_name), make_policy(policy_name))
    core, pacer = sim.core, sim.pool.pacer
    made: list[tuple[str, float, float | None, float | None]] = []  # job, made at, no-arrival start, sampled start
    next_at = [0.0]

    def checkpoint(_finished: int, _known: int, now: float) -> None:
        if now < next_at[0] or not core.pending:
            return
        next_at[0] = now + every_s
        waiting = [r.job_id for r in core.pending if r.first_start is None]
        if not waiting:
            return
        base = in_fork(lambda: run_forward(core, pacer, now))
        sampled: dict[str, list[float]] = {}
        for run in sampled_runs(core, pacer, now, base, samples, until_started=True):  # starts are scored
            for job_id, t in run.starts.items():
                sampled.setdefault(job_id, []).append(t)
        for job_id in waiting:
            s = sampled.get(job_id)
            made.append((job_id, now, base.starts.get(job_id), float(np.median(s)) if s else None))

    sim.run(jobs, on_progress=checkpoint)
    return _errors(made, {r.job_id: r.first_start for r in core.records.values()})


def _errors(made: list[tuple[str, float, float | None, float | None]], first_start: dict[str, float | None]
            ) -> dict[str, list[float]]:
    """Absolute start errors of forecasts ``(job, made at, no-arrival start, sampled start)`` against the
    actual first starts (as :func:`measure` keys them)."""
    out: dict[str, list[float]] = {key: [] for key in KEYS}
    seen: set[str] = set()
    for job_id, at, start, sampled_start in made:
        actual = first_start.get(job_id)
        if actual is None:
            continue
        out["lead"].append(actual - at)  # how far ahead the forecast looked
        first = job_id not in seen
        seen.add(job_id)
        for key, value in (("all", start), ("all_sampled", sampled_start)):
            if value is not None:
                out[key].append(abs(value - actual))
                if first:
                    out[key.replace("all", "first")].append(abs(value - actual))
    return out


async def _pending(stub: jgrpc.JobServiceStub) -> list[jpb.Job]:
    """Every PENDING job, over gRPC (ListJobs, paged)."""
    out: list[jpb.Job] = []
    token = ""
    while True:
        page = await stub.ListJobs(jpb.ListJobsRequest(states=[tpb.PENDING], page_size=1000, page_token=token))
        out.extend(page.jobs)
        token = page.next_page_token
        if not token:
            return out


def measure_replay(policy_name: str, jobs: list, cluster_name: str, every_s: float, samples: int,
                   speedup: float) -> tuple[dict[str, list[float]], dict[str, float]]:
    """:func:`measure` through ``halyard replay`` (see the module docstring); also the run's facts
    (forecasts made, wall seconds, the speed-up reached)."""
    text, source = read_cluster_text(cluster_name)
    cluster = parse_cluster(text, source=source)
    made: list[tuple[str, float, float | None, float | None]] = []
    facts = {"forecasts": 0, "forecast_cpu_s": 0.0}
    first_arrival = min(j.submit_time for j in jobs)

    import grpc  # after halyard (imported above), which turns gRPC's fork support off: forecasts fork

    async def watch(server: ControlPlaneServer, clock: ScaledClock) -> None:
        cp, forecasts = server.cp, server.forecasts
        if forecasts is None:
            raise RuntimeError("the replay's control plane makes no forecasts (gRPC imported before halyard?)")
        async with grpc.aio.insecure_channel(server.address) as channel:
            stub = jgrpc.JobServiceStub(channel)
            at = first_arrival
            while True:
                await clock.sleep_until(at)
                at += every_s
                waiting = [j for j in await _pending(stub) if not j.HasField("start_time")]  # never started
                if waiting:
                    forecast = await forecasts.refresh()
                    facts["forecasts"] += 1
                    facts["forecast_cpu_s"] += forecast.cpu_s
                    for job in await _pending(stub):  # read back over gRPC: Job.forecast
                        f = job.forecast
                        if job.HasField("start_time") or not job.HasField("forecast"):
                            continue
                        made.append((job.spec.job_id, f.made_at,
                                     f.expected_start if f.HasField("expected_start") else None,
                                     f.start_p50 if f.HasField("start_p50") else None))
                elif len(cp.core.records) == len(jobs):  # every job has started: the rest scores nothing
                    for record in list(cp.core.records.values()):  # running, or preempted and waiting again
                        if not record.state.terminal:
                            await stub.CancelJob(jpb.CancelJobRequest(job_id=record.job_id))
                    return

    began = time.perf_counter()
    run = asyncio.run(replay(jobs, cluster, text, policy=policy_name, speedup=speedup,
                             forecast=ForecastSettings(period_s=0, samples=samples, sample_finishes=False),
                             watch=watch))  # starts are scored: sampled runs stop once all present started
    facts["wall_s"] = time.perf_counter() - began
    facts["speedup_achieved"] = float(run.summary["speedup_achieved"])  # type: ignore[arg-type]
    return _errors(made, {r.job_id: r.first_start for r in run.core.records.values()}), facts


def stats(xs: list[float]) -> str:
    if not xs:
        return f"{'-':>7} {'-':>7} {0:>6}"
    return f"{np.median(xs) / HOUR:>7.2f} {np.percentile(xs, 90) / HOUR:>7.2f} {len(xs):>6}"


def _row(policy: str, errors: dict[str, list[float]], suffix: str) -> dict[str, object]:
    """One table row's figures, hours (None where no forecast was scored)."""

    def pct(xs: list[float], q: float) -> float | None:
        return round(float(np.percentile(xs, q)) / HOUR, 3) if xs else None

    first, every = errors["first" + suffix], errors["all" + suffix]
    return {"policy": policy, "first_median_h": pct(first, 50), "first_p90_h": pct(first, 90), "first_n": len(first),
            "all_median_h": pct(every, 50), "all_p90_h": pct(every, 90), "all_n": len(every)}


def _hours(x: object) -> str:
    return "-" if x is None else f"{x:.2f}"


def table(stored: dict) -> str:
    """The page's generated block: the replay's figures, one row per policy and arrival assumption."""
    commands = list(dict.fromkeys(run["command"] for run in stored["runs"]))
    lines = [*(f"<!-- generated by `{command}` -->" for command in commands), "",
             "| policy | arrivals assumed | first: median h | first: p90 h | jobs | all: median h | all: p90 h "
             "| forecasts | lead: median, p90 h | checkpoints | wall s |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for run in stored["runs"]:
        for label, row in (("none", run["none"]), (f"sampled (median of {run['samples']})", run["sampled"])):
            if row is None:
                lines.append(f"| {run['none']['policy']} | sampled: not run | - | - | - | - | - | - | - | - | - |")
                continue
            lines.append(f"| {row['policy']} | {label} | {_hours(row['first_median_h'])} "
                         f"| {_hours(row['first_p90_h'])} "
                         f"| {row['first_n']:,} | {_hours(row['all_median_h'])} | {_hours(row['all_p90_h'])} "
                         f"| {row['all_n']:,} | {_hours(run['lead_median_h'])}, {_hours(run['lead_p90_h'])} "
                         f"| {run['forecasts']:,} | {run['wall_s']:.0f} |")
    return "\n".join(lines) + "\n"


def pages(docs: Path) -> dict[Path, str]:
    """docs/forecast.md with its generated block rendered from docs/forecast.json (no replay)."""
    stored_path = docs / STORED
    if not stored_path.is_file():
        return {}
    stored = json.loads(stored_path.read_text(encoding="utf-8"))
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        from reproduce_easyscale import filled
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    return {docs / PAGE: filled(docs / PAGE, {"replay": table(stored)})}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--via", choices=("simulate", "replay"), default="simulate")
    ap.add_argument("--trace", type=Path, default=PHILLY_FULL)
    ap.add_argument("--cluster", default=None, help="built-in cluster or TOML (default: philly to simulate, "
                                                    "default to replay)")
    ap.add_argument("--skip", type=int, default=0,
                    help="start the slice at this trace position")
    ap.add_argument("--jobs", type=int, default=20_000)
    ap.add_argument("--compress", type=float, default=8.0)
    ap.add_argument("--every-min", type=float, default=120.0)
    ap.add_argument("--samples", type=int, default=0)
    ap.add_argument("--speedup", type=float, default=2000.0, help="replay: cluster seconds per wall second")
    ap.add_argument("--policies", default="fifo,tiresias,dally-literal,synergy-tune:fifo,crius")  # docs/forecast.md
    ap.add_argument("--write", action="store_true", help=f"replay: store docs/{STORED} and render docs/{PAGE}")
    args = ap.parse_args()
    cluster = args.cluster or ("default" if args.via == "replay" else "philly")
    trace = read_trace(args.trace).jobs[args.skip:args.skip + args.jobs]
    jobs = [dataclasses.replace(j, submit_time=j.submit_time / args.compress) for j in trace]
    print(f"{args.jobs} Philly jobs from #{args.skip} compressed {args.compress:g}x on {cluster} ({args.via}), a "
          f"forecast every {args.every_min:g} min; absolute start error, hours")
    print(f"{'policy':<20} {'arrivals':<12} {'forecasts':<10} {'median':>7} {'p90':>7} {'n':>6}   "
          "(lead: how long after the forecast the job started)")
    runs = []
    for name in args.policies.split(","):
        facts: dict[str, float] = {}
        if args.via == "replay":
            errors, facts = measure_replay(name, jobs, cluster, args.every_min * 60.0, args.samples, args.speedup)
        else:
            errors = measure(name, jobs, args.every_min * 60.0, args.samples, cluster)
        for arrivals, suffix in (("none", ""), (f"sampled x{args.samples}", "_sampled")):
            if suffix and not args.samples:
                continue
            for which in ("first", "all"):
                print(f"{name:<20} {arrivals:<12} {which:<10} {stats(errors[which + suffix])}", flush=True)
        print(f"{name:<20} {'lead':<12} {'all':<10} {stats(errors['lead'])}", flush=True)
        if facts:
            print(f"{name:<20} {facts['forecasts']:.0f} checkpoints, forecast CPU {facts['forecast_cpu_s']:.1f} s, "
                  f"{facts['wall_s']:.0f} s wall, speed-up reached {facts['speedup_achieved']:.0f}x", flush=True)
        lead = errors["lead"]
        runs.append({"command": "", "samples": args.samples, "none": _row(name, errors, ""),
                     "sampled": _row(name, errors, "_sampled") if args.samples else None,
                     "lead_median_h": round(float(np.median(lead)) / HOUR, 3) if lead else None,
                     "lead_p90_h": round(float(np.percentile(lead, 90)) / HOUR, 3) if lead else None,
                     "forecasts": int(facts.get("forecasts", 0)), "wall_s": round(facts.get("wall_s", 0.0), 1),
                     "speedup_achieved": round(facts.get("speedup_achieved", 0.0))})
    if args.write:
        if args.via != "replay":
            raise SystemExit("--write stores the replay's figures: give --via replay")
        argv = [a for a in sys.argv[1:] if a != "--write"]
        command = shlex.join(["nice", "-n", "10", ".venv/bin/python", "benchmarks/forecast_accuracy.py", *argv,
                              "--write"])
        stored = {"cluster": cluster, "skip": args.skip, "jobs": args.jobs, "compress": args.compress,
                  "every_min": args.every_min, "speedup": args.speedup, "runs": runs}
        for run in runs:
            run["command"] = command
        docs = ROOT / "docs"
        old = json.loads((docs / STORED).read_text(encoding="utf-8")) if (docs / STORED).is_file() else None
        if old is not None and all(old.get(k) == v for k, v in stored.items() if k != "runs"):
            # the same slice and settings: these policies' runs replace theirs, the others' stay
            mine = {run["none"]["policy"] for run in runs}
            stored["runs"] = [run for run in old["runs"] if run["none"]["policy"] not in mine] + runs
        (docs / STORED).write_text(json.dumps(stored, indent=1) + "\n", encoding="utf-8")
        for path, text in pages(docs).items():
            path.write_text(text, encoding="utf-8")
            print(f"wrote {path}")


if __name__ == "__main__":
    main()
