"""The schedule pin: a digest of every preset's event log on the bundled trace and cluster.

Refactors and speed-ups must not change what any policy decides: identical schedules
before and after. ``tests/test_schedules_pinned.py`` recomputes the digests
and compares them with ``tests/data/schedules.json``; a change that is meant to alter a
schedule rewrites the file on purpose and says so in its commit:

    .venv/bin/python benchmarks/pin_schedules.py --write

A digest covers each event's sequence number, kind, job, state and detail (placements)
and its time rounded to a microsecond. Synergy-OPT is left out: its ILP solver (HiGHS)
may pick another optimal vertex on another build, which is not a change of ours.
"""

from __future__ import annotations

import argparse
import hashlib
import json
from pathlib import Path

from halyard.cli.simulate import default_trace
from halyard.datamodel import load_cluster
from halyard.policies import make_policy, policy_names
from halyard.scheduling import Simulator
from halyard.scheduling.timing import performance_model_for
from halyard.traces import read_trace

PIN_FILE = Path(__file__).resolve().parents[1] / "tests" / "data" / "schedules.json"


def pinned_policies() -> list[str]:
    return [name for name in policy_names() if not name.startswith("synergy-opt")]


def digest(policy_name: str) -> str:
    policy = make_policy(policy_name)
    sim = Simulator(load_cluster("default"), policy, performance_model_for(policy))
    sim.run(read_trace(default_trace()).jobs)
    h = hashlib.sha256()
    for e in sim.core.log:
        h.update(f"{e.seq}|{e.time:.6f}|{e.job_id}|{e.kind.value}|{e.state.value}|{e.detail}\n".encode())
    return h.hexdigest()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write", action="store_true", help=f"rewrite {PIN_FILE.name} from this checkout")
    args = ap.parse_args()
    digests = {name: digest(name) for name in pinned_policies()}
    if args.write:
        PIN_FILE.write_text(json.dumps(digests, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    pinned = json.loads(PIN_FILE.read_text(encoding="utf-8")) if PIN_FILE.exists() else {}
    for name, value in digests.items():
        print(f"{name:24} {value[:16]} {'same' if pinned.get(name) == value else 'CHANGED'}")


if __name__ == "__main__":
    main()
