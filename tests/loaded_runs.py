"""A loaded run on synergy-128 and what tests compare of it: every event to the last bit, every wait reason.

Shared by the tests that show a speed-up changes no decision (a pass skipped, a round repeated): each runs
the same trace with the speed-up and without it and compares the two."""

from __future__ import annotations

from collections.abc import Sequence

from halyard.datamodel import JobSpec, JobState, load_cluster
from halyard.policies import Policy
from halyard.scheduling import SchedulingCore, Simulator
from halyard.scheduling.timing import performance_model_for


def loaded_run(policy: Policy, jobs: Sequence[JobSpec], until: tuple[int, int] | None
               ) -> tuple[SchedulingCore, list[tuple], dict[str, object]]:
    """The core after the run, its event log as tuples, and each job still waiting's reason."""
    sim = Simulator(load_cluster("synergy-128"), policy, performance_model_for(policy, contention="fair"))
    sim.run(jobs, until=until)
    core = sim.core
    log = [(e.seq, repr(e.time), e.job_id, e.kind, e.detail) for e in core.log]
    waits = {r.job_id: core.wait_of(r) for r in core.records.values() if r.state is JobState.PENDING}
    return core, log, waits
