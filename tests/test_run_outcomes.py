"""What a run tells a newcomer (issue 33): runs that did nothing fail, a policy that cannot act as
named says so, and the smaller messages (a directory as a trace, "1 GPU", a misspelt policy, the
control plane's address from the environment). Real subprocesses of the ``halyard`` command."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from halyard.cli import EXIT_RUN_REJECTED
from halyard.cli.report import SHOWN_REJECTED
from halyard.datamodel import JobSpec, load_cluster
from halyard.policies import make_policy, unmet_reliance
from halyard.policies.reasons import cannot_fit

HALYARD = [sys.executable, "-m", "halyard.cli"]
DEFAULT_CLUSTER = Path(__file__).resolve().parents[1] / "src" / "halyard" / "data" / "clusters" / "default.toml"
DEFAULT_TRACE_JOBS = 120  # src/halyard/data/traces/default.csv


def halyard(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*HALYARD, *args], cwd=cwd, env=(env or os.environ) | {"COLUMNS": "200"},
                          capture_output=True, text=True, timeout=300)


@pytest.fixture
def typo_cluster(tmp_path: Path) -> Path:
    """The default cluster with the GPU type misspelt (V-one-O-O): no model has a profile for it."""
    path = tmp_path / "v1oo.toml"
    path.write_text(DEFAULT_CLUSTER.read_text(encoding="utf-8").replace('"V100"', '"V1OO"'), encoding="utf-8")
    return path


HEADER = "job_id,submit_time,model,num_gpus,iterations,gpu_type"


def write_trace(path: Path, rows: list[str], header: str = HEADER) -> Path:
    path.write_text("\n".join([header, *rows]) + "\n", encoding="utf-8")
    return path


def test_simulate_in_which_every_job_was_rejected_fails_and_counts_the_lines_not_shown(tmp_path, typo_cluster):
    out = tmp_path / "r.json"
    proc = halyard("simulate", "--cluster", str(typo_cluster), "--no-progress", "--out", str(out), cwd=tmp_path)
    assert proc.returncode == EXIT_RUN_REJECTED, proc.stderr
    lines = proc.stderr.splitlines()
    assert sum(line.startswith("rejected job-") for line in lines) == SHOWN_REJECTED
    assert f"... and {DEFAULT_TRACE_JOBS - SHOWN_REJECTED} more rejected" in lines
    assert any(f"every one of the {DEFAULT_TRACE_JOBS} jobs was rejected" in line for line in lines)
    assert out.exists()  # the files are still written, for a look at what happened


def test_strict_makes_any_rejection_an_error(tmp_path):
    trace = write_trace(tmp_path / "t.csv", ["ok,0,resnet50,1,100,", "bad,1,resnet50,1,100,A100"])
    lenient = halyard("simulate", "--trace", str(trace), "--no-progress", cwd=tmp_path)
    assert lenient.returncode == 0, lenient.stderr  # one job ran: a result, with the rejection shown
    assert "rejected bad: field 'gpu_type'" in lenient.stderr and "more rejected" not in lenient.stderr
    strict = halyard("simulate", "--trace", str(trace), "--no-progress", "--strict", cwd=tmp_path)
    assert strict.returncode == EXIT_RUN_REJECTED
    assert "1 of 2 jobs rejected at submission, and --strict makes any rejection an error" in strict.stderr


@pytest.mark.slow
def test_replay_counts_rejections_instead_of_a_traceback_and_ends_without_disconnect_warnings(tmp_path, typo_cluster):
    trace = write_trace(tmp_path / "t.csv", ["a,0,resnet50,1,100,", "b,1,resnet50,1,100,", "c,2,resnet50,1,100,"])
    rejected = halyard("replay", "--trace", str(trace), "--cluster", str(typo_cluster), "--no-progress",
                       "--speedup", "10000", cwd=tmp_path)
    assert rejected.returncode == EXIT_RUN_REJECTED, rejected.stderr
    assert "Traceback" not in rejected.stderr and "every one of the 3 jobs was rejected" in rejected.stderr
    clean = halyard("replay", "--trace", str(trace), "--no-progress", "--speedup", "10000", cwd=tmp_path)
    assert clean.returncode == 0, clean.stderr
    assert "3 / 3" in clean.stdout
    assert "agent disconnected" not in clean.stderr  # its agents leave cleanly: no warning per node


def test_compare_fails_when_a_run_did_nothing(tmp_path, typo_cluster):
    trace = write_trace(tmp_path / "t.csv", ["a,0,resnet50,1,100,", "b,1,resnet50,1,100,"])
    proc = halyard("compare", "--trace", str(trace), "--cluster", str(typo_cluster), "--policies", "fifo,srtf",
                   "--workers", "1", "--no-progress", "--out-dir", str(tmp_path / "cmp"), cwd=tmp_path)
    assert proc.returncode == EXIT_RUN_REJECTED, proc.stderr
    assert "fifo-seed0: every one of the 2 jobs was rejected" in proc.stderr
    assert (tmp_path / "cmp" / "report.html").exists()


def test_a_policy_that_would_silently_be_fifo_warns_and_strict_refuses_it(tmp_path):
    """easyscale-heter on a trace without logical_workers gave exactly FIFO's numbers, silently."""
    warned = halyard("simulate", "--policy", "easyscale-heter", "--round-s", "60", "--no-progress", cwd=tmp_path)
    assert warned.returncode == 0, warned.stderr
    assert ("warning: policy easyscale-heter acts on jobs that set logical_workers (EasyScale's ESTs), and none "
            f"of the {DEFAULT_TRACE_JOBS} jobs of this trace does") in warned.stderr
    refused = halyard("simulate", "--policy", "easyscale-heter", "--no-progress", "--strict", cwd=tmp_path)
    assert refused.returncode == EXIT_RUN_REJECTED and "average JCT" not in refused.stdout  # refused before running
    elastic = write_trace(tmp_path / "e.csv", ["e1,0,resnet50,2,1000,1,4,4"],
                          header="job_id,submit_time,model,num_gpus,iterations,min_gpus,max_gpus,logical_workers")
    fine = halyard("simulate", "--trace", str(elastic), "--policy", "easyscale-heter", "--strict", "--no-progress",
                   cwd=tmp_path)
    assert fine.returncode == 0 and "warning" not in fine.stderr, fine.stderr


@pytest.mark.parametrize(("policy", "relies_on"), [
    ("easyscale-heter", ["logical_workers"]), ("easyscale-homo", ["logical_workers"]),
    ("elasticflow", ["deadline", "elastic"]), ("elasticflow-ls", ["elastic"]), ("crius-ddl", ["deadline"]),
    ("pollux", ["elastic"]), ("fifo,priority=first,preempt=priority", ["priority"]),
    ("fifo,admission=tenant-quota,preempt=quota-reclaim", ["quotas"]),
    ("fifo", []), ("tiresias", []), ("dally", []), ("crius", []), ("synergy-tune:srtf", []),
])
def test_presets_with_a_silent_fallback_name_it(policy, relies_on):
    """Plain fixed-size jobs without deadlines, priorities or quotas: which presets would quietly act as their
    base stages (a line each), and which are themselves on such a trace (none)."""
    cluster = load_cluster("default")
    jobs = [JobSpec(job_id=f"j{i}", submit_time=float(i), model="resnet50", num_gpus=2, iterations=100)
            for i in range(3)]
    lines = unmet_reliance(make_policy(policy), jobs, cluster)
    assert len(lines) == len(relies_on), lines
    for key, line in zip(relies_on, lines, strict=True):
        assert policy in line and (key in line or ("quota" in line and key == "quotas")), line
    with_all = [JobSpec(job_id="e", submit_time=0.0, model="resnet50", num_gpus=2, iterations=100, min_gpus=1,
                        max_gpus=4, logical_workers=4, deadline=10_000.0, priority=1), *jobs]
    left = unmet_reliance(make_policy(policy), with_all, cluster)
    assert left == ([line for line in lines if "quota" in line]), left  # quotas come from the cluster file


def test_a_directory_given_as_a_trace_or_cluster_says_so(tmp_path):
    (tmp_path / "traces").mkdir()
    (tmp_path / "traces" / "mine.csv").write_text("job_id\n", encoding="utf-8")
    proc = halyard("simulate", "--trace", "traces", cwd=tmp_path)
    assert proc.returncode == 2
    assert "traces: is a directory, not a trace file; give one of its files (mine.csv)" in proc.stderr
    assert "no such trace file" in halyard("trace", "stats", "nothing.csv", cwd=tmp_path).stderr
    cluster = halyard("simulate", "--cluster", "traces", cwd=tmp_path)
    assert cluster.returncode == 2 and "traces: is a directory, not a cluster file" in cluster.stderr
    assert "did you mean 'philly'?" in halyard("simulate", "--cluster", "phily", cwd=tmp_path).stderr


def test_counts_in_wait_reasons_are_singular_for_one():
    reason = cannot_fit("consolidated", "needs {:#GPU}; {} usable free on {:#node}", 1, 0, 1).reason
    assert reason == "needs 1 GPU; 0 usable free on 1 node"
    assert cannot_fit("x", "{:#usable GPU} free; {:.1f} s", 3, 2.25).reason == "3 usable GPUs free; 2.2 s"


def test_a_misspelt_policy_gets_a_suggestion_not_every_preset(tmp_path):
    proc = halyard("simulate", "--policy", "tiresais", cwd=tmp_path)
    assert proc.returncode == 2 and "did you mean 'tiresias'" in proc.stderr
    assert "`halyard policies`" in proc.stderr and len(proc.stderr) < 400


def test_client_commands_read_the_control_plane_address_from_the_environment(tmp_path):
    env = os.environ | {"HALYARD_CONTROL_PLANE": "127.0.0.1:9", "HALYARD_INSECURE": "1"}  # port 9: nobody
    proc = halyard("jobs", cwd=tmp_path, env=env)
    assert proc.returncode == 5 and "127.0.0.1:9" in proc.stderr, proc.stderr
    flag = halyard("jobs", "--control-plane", "127.0.0.1:7", cwd=tmp_path, env=env)
    assert "127.0.0.1:7" in flag.stderr and "127.0.0.1:9" not in flag.stderr  # the flag wins
