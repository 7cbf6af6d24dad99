"""The `halyard` command end to end, as a user runs it (a real subprocess)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from halyard.traces import read_trace

HALYARD = [sys.executable, "-m", "halyard.cli"]
REQUIRED_KEYS = {"policy", "jobs", "completed", "avg_jct_s", "p50_jct_s", "p95_jct_s", "p99_jct_s",
                 "makespan_s", "avg_queue_s", "gpu_utilization", "preemptions", "wall_s"}


def halyard(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = os.environ | {"COLUMNS": "120"}
    return subprocess.run([*HALYARD, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def test_simulate_default_writes_summary(tmp_path):
    out = tmp_path / "r.json"
    proc = halyard("simulate", "--out", str(out), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "average JCT" in proc.stdout and "default" in proc.stdout
    result = json.loads(out.read_text())
    assert set(result) >= REQUIRED_KEYS
    assert result["completed"] == result["jobs"] > 0
    assert result["policy"] == "fifo" and result["makespan_s"] > 0


def test_generate_then_simulate_with_las(tmp_path):
    trace = tmp_path / "t.csv"
    gen = halyard("trace", "generate", "--jobs", "40", "--rate", "30", "--split", "30,60,10",
                  "--multi-gpu", "--seed", "7", "--out", str(trace), cwd=tmp_path)
    assert gen.returncode == 0, gen.stderr
    assert len(read_trace(trace).jobs) == 40
    out = tmp_path / "las.json"
    sim = halyard("simulate", "--trace", str(trace), "--policy", "las", "--out", str(out), cwd=tmp_path)
    assert sim.returncode == 0, sim.stderr
    result = json.loads(out.read_text())
    assert result["policy"] == "las" and result["completed"] == 40


@pytest.mark.parametrize(("args", "message"), [
    (["simulate", "--frobnicate"], "unrecognized arguments: --frobnicate"),
    (["simulate", "--policy", "magic"], "unknown policy 'magic'"),
    (["simulate", "--cluster", "nowhere.toml"], "no such cluster file"),
    (["simulate", "--trace", "missing.csv"], "no such trace file"),
    (["simulate", "--measure", "9:3"], "--measure"),
    (["trace", "generate", "--jobs", "5", "--rate", "1", "--split", "1,2", "--out", "x.csv"], "--split"),
])
def test_bad_input_is_one_line_and_nonzero(tmp_path, args, message):
    proc = halyard(*args, cwd=tmp_path)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert message in lines[0] and "Traceback" not in proc.stderr


@pytest.mark.parametrize(("line", "message"), [
    ('deadline_s = "soon"', "deadline_s = 'soon' is not a number"),
    ("parallelism = 4", "parallelism = 4 is not a list"),
    ("gpus = true", "gpus = True is not a whole number"),
])
def test_a_job_file_value_of_the_wrong_type_is_named(tmp_path, line, message):
    """A job file's value the JobSpec cannot hold is a one-line error naming the key, before any connection
    (deadline_s and parallelism were a traceback before the CLI was type-checked)."""
    job = tmp_path / "job.toml"
    job.write_text('id = "a"\nmodel = "resnet50"\niterations = 10\n' + ("" if line.startswith("gpus") else "gpus = 1\n")
                   + line + "\n")
    proc = halyard("submit", "--insecure", "--control-plane", "127.0.0.1:1", "--file", str(job), cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().splitlines() == [
        f"halyard submit: error: field '--file': a value has the wrong type: {message}"]


def test_bad_cluster_file_names_line_and_field(tmp_path):
    bad = tmp_path / "c.toml"
    bad.write_text('name = "c"\n[[racks]]\nuplink_gbit_s = 100\n[[racks.nodes]]\ngpu_type = "V100"\n'
                   'gpus = -8\ncpus = 4\nmemory_gb = 10\nfabric = "pcie"\nfabric_gbyte_s = 16\nnic_gbit_s = 100\n')
    proc = halyard("simulate", "--cluster", str(bad), cwd=tmp_path)
    assert proc.returncode == 2
    assert f"{bad}:6, field 'racks[0].nodes[0].gpus': must be positive" in proc.stderr


def test_closed_pipe_is_not_an_error(tmp_path):
    """`halyard trace stats --json | head -1` must not report an error."""
    trace = Path(__file__).resolve().parents[1] / "src" / "halyard" / "data" / "traces" / "default.csv"
    proc = subprocess.run(f"{sys.executable} -m halyard.cli trace stats --json {trace} | head -c 1",
                          shell=True, cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert proc.stdout == "{"
    assert "error" not in proc.stderr and "Traceback" not in proc.stderr


def test_profiles_show_lists_numbers_and_sources(tmp_path):
    proc = halyard("profiles", "show", "resnet50", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    lines = {line.split()[0]: line for line in proc.stdout.splitlines()[1:] if line.strip()}
    assert "compute_s.V100" in lines and "gradient_bytes" in lines and "restart_cost_s" in lines
    # every figure carries a source after its unit, estimates are starred
    assert "REFERENCE-NUMBERS" in proc.stdout or "EasyScale" in proc.stdout
    listed = halyard("profiles", "list", cwd=tmp_path)
    assert listed.returncode == 0 and "resnet50" in listed.stdout and "bert-large" in listed.stdout
    bad = halyard("profiles", "show", "nosuchnet", cwd=tmp_path)
    assert bad.returncode == 2 and "unknown model 'nosuchnet'" in bad.stderr


def test_replay_cli_writes_simulate_keys_and_speedup(tmp_path):
    from halyard.datamodel import JobSpec
    from halyard.traces import write_trace

    trace = tmp_path / "t.csv"
    write_trace([JobSpec(job_id=f"r{i}", submit_time=60.0 * i, model="resnet18", num_gpus=8, iterations=2000)
                 for i in range(12)], trace)
    out = tmp_path / "replay.json"
    proc = halyard("replay", "--trace", str(trace), "--speedup", "2000", "--no-progress", "--out", str(out),
                   cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(out.read_text())
    assert REQUIRED_KEYS | {"speedup_achieved"} <= set(result)
    assert result["completed"] == 12 and result["speedup_achieved"] > 100
    sim_out = tmp_path / "sim.json"
    assert halyard("simulate", "--trace", str(trace), "--out", str(sim_out), cwd=tmp_path).returncode == 0
    expected = json.loads(sim_out.read_text())
    assert result["avg_jct_s"] == pytest.approx(expected["avg_jct_s"], rel=0.02)
    assert result["makespan_s"] == pytest.approx(expected["makespan_s"], rel=0.02)


def test_the_command_table_is_what_the_modules_register():
    """halyard.cli.COMMANDS says which module registers each command (main imports only that one)."""
    from halyard.cli import COMMANDS, build_parser

    (commands,) = [a for a in build_parser()._actions if a.dest == "command"]
    assert list(commands.choices) == list(COMMANDS)
    for name, module in COMMANDS.items():
        (only,) = [a for a in build_parser(name)._actions if a.dest == "command"]
        assert name in only.choices and set(only.choices) == {c for c, m in COMMANDS.items() if m == module}


def test_a_client_command_does_not_import_the_simulator():
    """`halyard jobs` talks gRPC: it must not pay for the policies, numpy and scipy (2.4 s of imports when
    every command's module was imported for every command)."""
    probe = ("import sys, contextlib, io\nfrom halyard.cli import main\n"
             "with contextlib.suppress(SystemExit), contextlib.redirect_stdout(io.StringIO()):\n"
             "    main(['jobs', '--help'])\n"
             "print(sorted(m for m in ('scipy', 'numpy', 'halyard.policies', 'halyard.scheduling.core') "
             "if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
