"""Which nodes can run which jobs when agents of different backends share a cluster.

An emulated agent runs the performance model: it can carry a job without a command and
never executes one (a command job placed there "ran" without running anything). A process
or gpu agent runs the job's command as real processes: a job without a command fails
there. So a node's backend, said in its agent's Register, splits the jobs in two kinds,
and a job is placed only on nodes of its kind. An agent that names no backend (an older
one) takes either kind, as every agent did before.

The scheduling core enforces this in one place for every policy: while the schedulable
nodes all take every live job (a cluster of one backend, or the simulator, whose nodes
have no backend) a pass is the usual one; otherwise it runs the policy once per job kind
on a view holding only that kind's jobs and nodes (:meth:`SchedulingCore.schedule`),
the way Kubernetes filters nodes by a pod's node selector before any scoring plugin sees
them. Each kind has its own policy instance, so what a policy keeps from pass to pass
(delay timers, kept orders) is about one kind's jobs only.
"""

from __future__ import annotations

import numpy as np

from halyard.datamodel import JobSpec
from halyard.policies import Unplaced
from halyard.policies.reasons import cannot_fit

ANY = 0  # no backend said (an older agent), or no agent: takes either kind of job
EMULATES = 1  # the emulated backend: jobs without a command
RUNS_COMMANDS = 2  # the process and gpu backends: jobs with a command
KINDS = (EMULATES, RUNS_COMMANDS)

_KIND_OF_BACKEND = {"emulated": EMULATES, "process": RUNS_COMMANDS, "gpu": RUNS_COMMANDS}
STAGE = "backend"  # the stage name in a wait reason the core gives itself


def backend_kind(backend: str, *, emulated_takes_commands: bool = False) -> int:
    """The kind of job an agent of ``backend`` (Register.backend) can run; :data:`ANY` when unknown, and
    for an emulated agent that stands in for a real one (``emulated_takes_commands``: the test kit)."""
    kind = _KIND_OF_BACKEND.get(backend, ANY)
    return ANY if kind == EMULATES and emulated_takes_commands else kind


def job_kind(spec: JobSpec) -> int:
    """:data:`RUNS_COMMANDS` for a job with a command, else :data:`EMULATES`."""
    return RUNS_COMMANDS if spec.command else EMULATES


def describe_kind(kind: int) -> str:
    return {EMULATES: "emulated", RUNS_COMMANDS: "process/gpu", ANY: "any"}[kind]


class NodeBackends:
    """Each node's kind (by node index), from its agent's Register."""

    def __init__(self, nodes: int) -> None:
        self.kinds = np.zeros(nodes, dtype=np.int8)
        self.known = False  # some node has a kind: passes may need splitting

    def set(self, index: int, kind: int) -> bool:
        """Set node ``index``'s kind; whether it changed."""
        if self.kinds[index] == kind:
            return False
        self.kinds[index] = kind
        self.known = bool(self.kinds.any())
        return True

    def eligible(self, kind: int) -> np.ndarray:
        """Mask of the nodes that take jobs of ``kind``."""
        return (self.kinds == ANY) | (self.kinds == kind)

    def split(self, schedulable: np.ndarray, live: dict[int, int]) -> list[int] | None:
        """The job kinds to pass separately, or None when one pass over everything places every
        job only where it can run (every schedulable node takes every kind of live job)."""
        if not self.known:
            return None
        kinds = set(np.unique(self.kinds[schedulable]).tolist()) - {ANY}
        needed = [k for k in KINDS if live.get(k, 0)]
        if all(kinds <= {k} for k in needed):
            return None
        return needed

    def kind_of(self, index: int) -> int:
        return int(self.kinds[index])


def no_node_for(kind: int, others: int) -> Unplaced:
    """Why a job of ``kind`` waits when no schedulable node takes its kind (``others``: the
    schedulable nodes of the other kind)."""
    nodes = f"{others} connected node" + ("" if others == 1 else "s")
    if kind == RUNS_COMMANDS:
        return cannot_fit(STAGE, "it has a command, and no connected agent runs commands (process or gpu backend); "
                                 "{} {} emulated, which never execute a command", nodes, "is" if others == 1 else "are")
    return cannot_fit(STAGE, "it has no command, so it runs only on an emulated agent, and none is connected; "
                             "{} {} real processes, which need a command", nodes, "runs" if others == 1 else "run")
