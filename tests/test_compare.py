"""`halyard compare` and the per-job / timeline tables of `simulate` and `replay` (issue 17).

The report must open offline (plots inside the file), show every policy with its
ratio to the baseline, and its tables must agree with the JSON summaries they sit
beside; a run's command must reproduce that run's files.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import re
import shlex
import time
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from halyard.cli import main
from halyard.controlplane.runtables import read_table
from halyard.datamodel import parse_cluster
from halyard.experiments import RunSpec, run_many, simulate_jobs
from halyard.experiments.replay import replay
from halyard.testing.cluster import small_cluster_toml
from halyard.traces import generate_synergy_trace, write_trace

POLICIES = ("fifo", "tiresias", "dally")
TENANTS = ("team-a", "team-b", "team-c")


def small_trace(n: int = 36) -> list:
    """A few dozen multi-GPU jobs from three tenants that queue on 16 GPUs (Tiresias preempts some)."""
    jobs = generate_synergy_trace(n, rate_per_hour=30, multi_gpu=True, seed=5, duration_scale=0.1)
    return [dataclasses.replace(j, tenant=TENANTS[i % 3]) for i, j in enumerate(jobs)]


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> tuple[Path, Path]:
    folder = tmp_path_factory.mktemp("compare-inputs")
    trace, cluster = folder / "trace.csv", folder / "cluster.toml"
    write_trace(small_trace(), trace)
    cluster.write_text(small_cluster_toml(2), encoding="utf-8")
    return trace, cluster


@pytest.fixture(scope="module")
def compared(inputs, tmp_path_factory) -> Path:
    trace, cluster = inputs
    out = tmp_path_factory.mktemp("compare") / "report"
    code = main(["compare", "--trace", str(trace), "--cluster", str(cluster), "--policies", ",".join(POLICIES),
                 "--baseline", "fifo", "--workers", "2", "--out-dir", str(out), "--no-progress"])
    assert code == 0
    return out


class _Page(HTMLParser):
    """The parts of the report the tests read: images, links, policy rows and their ratio cells."""

    def __init__(self) -> None:
        super().__init__()
        self.images: list[str] = []
        self.links: list[str] = []
        self.rows: dict[str, dict[str, float]] = {}  # policy -> metric -> ratio
        self.tenants: list[str] = []
        self._policy: str | None = None
        self._metric: str | None = None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "img":
            self.images.append(a["src"])
        elif tag == "a":
            self.links.append(a["href"])
        elif tag == "tr" and "data-policy" in a:
            self._policy = a["data-policy"]
            self.rows[self._policy] = {}
        elif tag == "tr" and "data-tenant" in a:
            self.tenants.append(a["data-tenant"])
        elif tag == "td" and self._policy is not None:
            self._metric = a.get("data-metric")
        elif tag == "span" and self._policy and self._metric and "data-ratio" in a:
            self.rows[self._policy][self._metric] = float(a["data-ratio"])

    def handle_endtag(self, tag):
        if tag == "table":
            self._policy = None


def test_report_is_self_contained_with_every_policy_and_ratio(compared):
    text = (compared / "report.html").read_text(encoding="utf-8")
    page = _Page()
    page.feed(text)
    # Offline: nothing is fetched from anywhere; the plots are SVG inside the page.
    assert not re.search(r'(src|href)="(https?:)?//', text)
    assert "<script" not in text and "<link" not in text
    assert len(page.images) == 2
    for src in page.images:
        prefix = "data:image/svg+xml;base64,"
        assert src.startswith(prefix)
        svg = base64.b64decode(src[len(prefix):]).decode("utf-8")
        assert "<svg" in svg and svg.count("<path") > 20  # axes, ticks and the policies' lines
        for policy in POLICIES:
            assert f">{policy}<" in svg  # every policy is in each plot's legend
    runs = json.loads((compared / "compare.json").read_text())["runs"]
    summaries = {r["summary"]["policy"]: r["summary"] for r in runs}
    assert set(page.rows) == set(POLICIES)
    for policy in POLICIES:
        for metric in ("avg_jct_s", "p95_jct_s", "avg_queue_s", "makespan_s", "gpu_utilization"):
            expected = summaries[policy][metric] / summaries["fifo"][metric]
            assert page.rows[policy][metric] == pytest.approx(expected, rel=1e-5), (policy, metric)
    assert page.rows["fifo"]["avg_jct_s"] == 1.0
    assert summaries["tiresias"]["preemptions"] > 0  # the trace makes the policies differ
    assert page.rows["tiresias"]["avg_queue_s"] != 1.0
    assert page.tenants == list(TENANTS)
    for policy in POLICIES:  # every run's files are linked and exist
        for name in ("summary.json", "jobs.parquet", "timeline.parquet"):
            assert f"runs/{policy}-seed0/{name}" in page.links
            assert (compared / "runs" / f"{policy}-seed0" / name).is_file()


def test_job_tables_and_timelines_agree_with_the_summaries(compared):
    for policy in POLICIES:
        folder = compared / "runs" / f"{policy}-seed0"
        summary = json.loads((folder / "summary.json").read_text())
        jobs = pq.read_table(folder / "jobs.parquet")
        assert jobs.num_rows == summary["jobs"] == 36
        done = jobs.filter(pc.equal(jobs["state"], "COMPLETED"))
        assert done.num_rows == summary["completed"]
        jct = done["jct_s"].to_numpy()
        assert jct.mean() == pytest.approx(summary["avg_jct_s"], rel=1e-12)
        assert np.percentile(jct, 95) == pytest.approx(summary["p95_jct_s"], rel=1e-12)
        assert done["queue_s"].to_numpy().mean() == pytest.approx(summary["avg_queue_s"], rel=1e-9, abs=1e-9)
        assert pc.sum(jobs["preemptions"]).as_py() == summary["preemptions"]
        np.testing.assert_allclose(done["finish_s"].to_numpy() - done["submit_s"].to_numpy(), jct)
        assert set(jobs["tenant"].to_pylist()) == set(TENANTS)
        assert all(p for p in done["placement"].to_pylist()) and pc.min(done["nodes"]).as_py() >= 1
        # The timeline is the occupancy step function: its time-weighted GPU utilisation
        # over the makespan is the summary's (GPU-seconds held / capacity).
        timeline = pq.read_table(folder / "timeline.parquet")
        t = timeline["time_s"].to_numpy()
        util = timeline["gpu_util"].to_numpy()
        assert np.all(np.diff(t) > 0)
        assert (util[:-1] * np.diff(t)).sum() / summary["makespan_s"] == pytest.approx(
            summary["gpu_utilization"], rel=1e-9)
        assert timeline["running"].to_numpy()[-1] == 0 and timeline["queued"].to_numpy().max() > 0


def test_each_runs_command_reproduces_its_files(compared, tmp_path):
    runs = json.loads((compared / "compare.json").read_text())["runs"]
    run = next(r for r in runs if r["name"] == "tiresias-seed0")
    argv = shlex.split(run["command"])
    assert argv[:2] == ["halyard", "simulate"]
    out = tmp_path / "again"
    argv[argv.index("--out-dir") + 1] = str(out)
    assert main([*argv[1:], "--no-progress"]) == 0
    for name in ("jobs.parquet", "timeline.parquet"):
        assert pq.read_table(out / name).equals(pq.read_table(compared / "runs" / "tiresias-seed0" / name))
    again = json.loads((out / "summary.json").read_text())
    for key, value in run["summary"].items():
        if key not in ("wall_s", "jobs_per_wall_s", "avg_pass_ms", "p50_pass_ms", "p99_pass_ms", "max_pass_ms"):
            assert again[key] == value, key


def test_a_runs_command_parses_back_to_its_settings():
    from halyard.cli import build_parser

    spec = RunSpec(name="x", trace="my trace.csv", policy="synergy-tune:srtf", cluster="dally-2rack", seed=7,
                   round_s=123.456789, contention="mltcp", trace_format="csv", measure=(5, 10))
    args = build_parser().parse_args(spec.argv("out/x", "csv")[1:])
    assert (str(args.trace), args.policy, args.cluster, args.seed, args.round_s, args.contention, args.trace_format,
            args.measure, str(args.out_dir), args.table_format) == (
        "my trace.csv", "synergy-tune:srtf", "dally-2rack", 7, 123.456789, "mltcp", "csv", "5:10", "out/x", "csv")
    assert "--table-format" not in spec.argv("out/x")  # parquet is simulate's default


def test_compare_refuses_bad_input_naming_the_option(inputs, tmp_path, capsys):
    trace, cluster = inputs
    base = ["compare", "--trace", str(trace), "--cluster", str(cluster), "--out-dir", str(tmp_path / "x")]
    assert main([*base, "--policies", "fifo,srtf", "--baseline", "las"]) == 2
    assert "--baseline" in capsys.readouterr().err
    assert main([*base, "--policies", "fifo,nosuch"]) == 2
    assert "nosuch" in capsys.readouterr().err
    assert main([*base, "--policies", "fifo,fifo"]) == 2
    assert "--policies" in capsys.readouterr().err
    assert main([*base, "--policies", "fifo", "--seeds", "1,x"]) == 2
    assert "--seeds" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()


def test_simulate_writes_csv_tables_equal_to_parquet(inputs, tmp_path):
    trace, cluster = inputs
    for fmt in ("parquet", "csv"):
        assert main(["simulate", "--trace", str(trace), "--cluster", str(cluster), "--policy", "srtf",
                     "--out-dir", str(tmp_path / fmt), "--table-format", fmt, "--no-progress"]) == 0
    for name in ("jobs", "timeline"):
        a = read_table(tmp_path / "parquet" / f"{name}.parquet")
        b = read_table(tmp_path / "csv" / f"{name}.csv")
        assert a.schema == b.schema and a.num_rows == b.num_rows > 0
        for column in a.column_names:
            x, y = a[column].to_pylist(), b[column].to_pylist()
            if a.schema.field(column).type == "double":
                np.testing.assert_allclose(np.array(x, dtype=float), np.array(y, dtype=float), rtol=1e-12)
            else:
                assert [v or None for v in x] == [v or None for v in y], column  # CSV: "" reads as null


async def test_replay_makes_the_tables_simulate_makes():
    """The same core, the same records: replay's tables are simulate's (Synergy-TUNE, so CPU
    and memory shares differ from the GPU share), up to float rounding of the shifted clock."""
    policy = "synergy-tune:srtf"
    toml = small_cluster_toml(2)
    cluster = parse_cluster(toml)
    jobs = generate_synergy_trace(16, rate_per_hour=60, split=(60, 30, 10), multi_gpu=True, seed=3,
                                  duration_scale=0.02)
    expected, _ = simulate_jobs(jobs, cluster, policy)
    run = await replay(jobs, cluster, toml, policy=policy, speedup=5000.0)
    got = run.tables
    exact = ["job_id", "tenant", "model", "gpus", "state", "preemptions", "restarts", "placements", "placement",
             "nodes", "racks"]
    assert got.jobs.select(exact).equals(expected.jobs.select(exact))
    for column in ("submit_s", "first_start_s", "finish_s", "jct_s", "queue_s"):
        np.testing.assert_allclose(got.jobs[column].to_numpy(), expected.jobs[column].to_numpy(), rtol=0.02,
                                   atol=1e-6)
    counts = ["gpus_used", "cpu_util", "memory_util", "queued", "running"]
    assert got.timeline.select(counts).equals(expected.timeline.select(counts))
    assert pc.max(expected.timeline["cpu_util"]).as_py() != pc.max(expected.timeline["gpu_util"]).as_py()
    np.testing.assert_allclose(got.timeline["time_s"].to_numpy(), expected.timeline["time_s"].to_numpy(),
                               rtol=0.02)


def test_runs_go_to_a_local_ray_instance(inputs, monkeypatch):
    ray = pytest.importorskip("ray", reason="Ray is an optional extra (pip install -e '.[ray]'); "
                                            "without it --ray cannot run and this test has nothing to check")
    trace, cluster = inputs
    monkeypatch.chdir(trace.parent)  # paths relative to here, which Ray's workers need not share
    specs = [RunSpec(name=p, trace=trace.name, policy=p, cluster=cluster.name) for p in ("fifo", "srtf")]
    started = time.perf_counter()
    on_ray = run_many(specs, totals=[36, 36], ray_address="local", progress=False)
    assert not ray.is_initialized()  # the instance it started is shut down again
    local = run_many(specs, totals=[36, 36], workers=1, progress=False)
    assert [r.spec for r in on_ray] == specs
    for a, b in zip(on_ray, local, strict=True):
        assert a.tables.jobs.equals(b.tables.jobs) and a.tables.timeline.equals(b.tables.timeline)
    assert time.perf_counter() - started < 120


def test_a_failed_run_is_named_and_finished_runs_are_reported(inputs, tmp_path, capsys):
    """Off a terminal each finished run gets a line (no silent minutes); a run that fails in its
    worker process ends the sweep with an error naming it and its command."""
    from halyard.datamodel import HalyardError

    trace, cluster = inputs
    specs = [RunSpec(name="good", trace=str(trace), policy="fifo", cluster=str(cluster)),
             RunSpec(name="broken", trace=str(tmp_path / "missing.csv"), policy="fifo", cluster=str(cluster))]
    with pytest.raises(HalyardError, match=r"run broken failed: .*missing\.csv.*halyard simulate"):
        run_many(specs, totals=[36, 1], workers=1, progress=True, label="sweep")
    assert "sweep: 1/2 good: avg JCT" in capsys.readouterr().err


ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("script, args, outputs", [
    ("reproduce_dally.py", ["--racks", "2", "--policies", "dally", "tiresias"],
     ["dally-reproduction.json", "dally-reproduction-table.md", "img/dally-reproduction.png",
      "dally-reproduction.md"]),
    ("reproduce_synergy.py", [], ["synergy-trace.json", "synergy-trace-table.md", "synergy-trace.html"]),
])
def test_reproduction_scripts_take_a_trace_and_report_progress(script, args, outputs, tmp_path):
    """The scripts are callers of the compare machinery: --trace, a line per finished run off a
    terminal, and each run's files and command under --work."""
    import subprocess
    import sys

    trace = tmp_path / "small.csv"
    write_trace(small_trace(24), trace)
    out, work = tmp_path / "out", tmp_path / "work"
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / script), "--trace", str(trace), *args,
                           "--out", str(out), "--work", str(work), "--workers", "2"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    runs = sorted(p.name for p in (work / "runs").iterdir())
    assert len(runs) == (2 if "dally" in script else 8)
    assert proc.stderr.count("reproduction: ") == len(runs)  # one progress line per run
    for name in outputs:
        assert (out / name).stat().st_size > 0
    for run in runs:
        summary = json.loads((work / "runs" / run / "summary.json").read_text())
        # Synergy's figures are over the middle half of the arrivals (its --measure window).
        assert summary["trace"] == str(trace) and summary["completed"] == (24 if "dally" in script else 12)
        assert pq.read_table(work / "runs" / run / "jobs.parquet").num_rows == 24


def test_policies_may_list_pipelines_separated_by_semicolons():
    from halyard.cli.compare import _names

    assert _names("fifo,tiresias,dally", "--policies") == ["fifo", "tiresias", "dally"]
    assert _names("fifo; ordering=las,placement=synergy-tune", "--policies") == [
        "fifo", "ordering=las,placement=synergy-tune"]
