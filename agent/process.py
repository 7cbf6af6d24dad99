"""The process backend: an agent that runs each job's command as real processes.

It speaks the same AgentService stream as the emulated agent
(:class:`halyard.agent.base.StreamAgent`); only what happens on the commands
differs:

* **Launch** starts ``JobSpec.command`` once on this node (the job's share of
  the node), with the ``HALYARD_*`` environment of :mod:`halyard.agent.worker`
  over an allow-list of the agent's own (:mod:`halyard.agent.jobenv`), never all of it,
  through :mod:`halyard.agent.spawn` so that the CPU cores are pinned
  (``sched_setaffinity``) and the process joins a cgroup v2 with ``memory.max``
  before it runs a line of the script. Where the machine gives no cgroup v2
  memory controller to the agent, memory is not enforced and the log and every
  heartbeat's ``detail`` say so. A job with no command is refused with
  ``Exited(FAILED)`` naming the reason. A relaunch of a job whose previous
  attempt is still checkpointing on this node waits for it to exit.
* The worker library in the script connects to the agent's Unix socket and
  reports iterations and checkpoints; the leader's agent forwards them as
  ``Progress`` on each heartbeat.
* **Preempt**: a ``preempt`` message and SIGTERM to the job's process group;
  after the grace period, SIGKILL. The exit is ``Exited(PREEMPTED)`` with the
  last checkpoint the worker reported, and the job's next attempt on this node
  starts from that checkpoint, whatever the Launch says (a policy's Preempt
  ends the attempt in the control plane at once, so its Launch carries the
  model's estimate of the progress, which a slow start can fall behind).
* **Reconfigure** (CPU/memory): re-pin every thread of the job's processes and
  rewrite ``memory.max``; the worker is told its new share. A Reconfigure with a
  ``restart_attempt`` (a resize or migration, EasyScale §3.2 "Adapting to
  elasticity") stops the current attempt as a preemption does (the worker
  checkpoints on demand and exits), reports no exit for it, and starts the new
  attempt on the new allocation once the old process is gone, from the iteration
  that checkpoint ends at, with the new size and logical-worker counts in its
  environment.
* **SetTimeShift**: forwarded to the worker (shift, period, epoch; 0 s is a shift), which starts its
  iterations on the grid ``epoch + shift + k x period`` and reports each start's drift, passed on
  in ``Progress.time_shift_drift_s``.
* **Drain**: logged and reported in heartbeats; the control plane stops placing
  work here and decides about the running jobs.
* **Output**: the job's stdout and stderr go through a pipe to
  ``--work-dir/logs/JOB-ATTEMPT-NODE.log``, capped at ``log_max_bytes`` (the newest output
  kept, :mod:`halyard.agent.joblogs`); **ReadLog** answers with a piece of it, which the
  control plane streams to ``halyard logs``.
* **Exit**: ``Exited(COMPLETED)`` when the script ran all its iterations (the
  worker said ``done``) and exited 0, else ``Exited(FAILED)`` with the exit code
  and the tail of its output; both carry the last checkpointed iteration.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import math
import os
import pwd
import shutil
import signal
import sys
import tempfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Unpack

import structlog

from halyard.agent.base import AgentOptions, StreamAgent
from halyard.agent.jobenv import EnvironmentAllowList
from halyard.agent.joblogs import DEFAULT_MAX_BYTES, READ_MAX_BYTES, CappedLog, open_dir, read_log
from halyard.agent.profiling import model_for, model_profiling, refused
from halyard.agent.worker import clock_env, time_shift_env
from halyard.clock import Clock
from halyard.datamodel import Allocation, JobSpec, Node, NodeAllocation, ValidationError
from halyard.datamodel.limits import MAX_JOB_ID, check_name
from halyard.emulator import PerformanceModel
from halyard.v1 import agent_service_pb2 as apb
from halyard.wire import allocation_from_pb, spec_from_pb

log = structlog.get_logger("halyard.agent")

VERSION = "halyard-process/1"
RECENT_ITERATIONS = 8  # iteration times each Progress carries
OUTPUT_TAIL_CHARS = 400  # of a failed job's output, in Exited.message
MASTER_PORT_BASE, MASTER_PORT_SPAN = 20000, 20000  # rendezvous port: a hash of the job id in this range
CGROUP_ROOT = Path("/sys/fs/cgroup")
WORKER_DRAIN_S = 2.0  # wall seconds to read a worker's last messages after its process exited
DEFAULT_RESTART_GRACE_S = 30.0  # a Reconfigure restart that names no grace: the control plane's preempt grace


@dataclass
class ProcessJob:
    """One job's process on this node and what its worker has reported."""

    job_id: str
    attempt: int
    spec: JobSpec
    allocation: Allocation
    leader: bool
    total: int
    cores: tuple[int, ...] = ()
    cgroup: Path | None = None
    process: asyncio.subprocess.Process | None = None
    writer: asyncio.StreamWriter | None = None
    disconnected: asyncio.Event = field(default_factory=asyncio.Event)  # the worker's socket closed
    iterations_done: float = 0.0
    checkpoint: int = 0
    finished: bool = False  # the worker said done
    stopping: bool = False  # a Preempt asked it to stop
    restarting: bool = False  # stopped for a resize/migration: the job goes on as a newer attempt
    follows: ProcessJob | None = None  # the attempt this one restarts from (a resize or migration)
    time_shift: tuple[float, float, float] | None = None  # (seconds, period_s, epoch_s); 0 s is a shift
    drift_s: float | None = None  # the worker's last measured offset of an iteration start from its grid
    recent: collections.deque[float] = field(default_factory=lambda: collections.deque(maxlen=RECENT_ITERATIONS))
    exited: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task[None] | None = None
    log_path: Path | None = None
    output: CappedLog | None = None
    pump: asyncio.Task[None] | None = None  # copies the output pipe into ``output`` (held: tasks are weakly referenced)

    def tell(self, message: dict) -> None:
        if self.writer is not None and not self.writer.is_closing():
            self.writer.write((json.dumps(message) + "\n").encode())


class Enforcement:
    """What this machine lets the agent enforce: CPU affinity always (Linux), memory with a cgroup v2."""

    def __init__(self, cgroup_root: Path = CGROUP_ROOT) -> None:
        self.cores: tuple[int, ...] = tuple(sorted(os.sched_getaffinity(0)))
        self.cgroup_parent: Path | None = None
        self.memory_reason = ""
        controllers = cgroup_root / "cgroup.controllers"
        if not controllers.exists():
            self.memory_reason = f"no cgroup v2 hierarchy at {cgroup_root}"
            return
        own = _own_cgroup()
        parent = cgroup_root / own.lstrip("/") if own is not None else None
        if parent is None:
            self.memory_reason = "this process is in no cgroup v2 (/proc/self/cgroup)"
        elif "memory" not in _read(parent / "cgroup.subtree_control").split():
            self.memory_reason = (f"the memory controller is not enabled for children of {parent} "
                                  "(run the agent in a delegated cgroup, e.g. systemd Delegate=yes)")
        elif not os.access(parent, os.W_OK):
            self.memory_reason = f"{parent} is not writable by the agent"
        else:
            self.cgroup_parent = parent

    @property
    def memory_enforced(self) -> bool:
        return self.cgroup_parent is not None

    def describe(self) -> str:
        cpus = f"cpus: pinned (sched_setaffinity over {len(self.cores)} cores)"
        memory = (f"memory: cgroup v2 memory.max under {self.cgroup_parent}" if self.memory_enforced
                  else f"memory: unenforced ({self.memory_reason})")
        return f"{cpus}; {memory}"


def _own_cgroup() -> str | None:
    for line in _read(Path("/proc/self/cgroup")).splitlines():
        if line.startswith("0::"):
            return line[3:]
    return None


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="ascii")
    except OSError:
        return ""


class ProcessOptions(AgentOptions, total=False):
    """:class:`ProcessAgent`'s keyword options that the GPU backend passes through as they are."""

    run_as: str | None
    log_max_bytes: int
    pass_env: tuple[str, ...]


class ProcessAgent(StreamAgent):
    """``halyard agent --backend process``: real processes, no GPU needed."""

    backend = "process"
    version = VERSION

    def __init__(self, target: str, node: Node | str, *, work_dir: str | Path, shared_clock: Clock | None = None,
                 hosts: dict[str, str] | None = None, enforcement: Enforcement | None = None,
                 run_as: str | None = None, log_max_bytes: int = DEFAULT_MAX_BYTES, pass_env: tuple[str, ...] = (),
                 **stream: Unpack[AgentOptions]) -> None:
        super().__init__(target, node, shared_clock=shared_clock, **stream)
        self.env_allow = EnvironmentAllowList(pass_env)  # what a job inherits of the agent's environment
        if log_max_bytes < 1024:
            raise ValidationError(f"must be at least 1 KiB, got {log_max_bytes} bytes", field="--log-max-mb")
        self.log_max_bytes = log_max_bytes
        self.work_dir = Path(work_dir).resolve()
        self.run_as = RunAs.lookup(run_as) if run_as else None
        self.hosts = dict(hosts or {})  # node name -> address for HALYARD_MASTER_ADDR (default: the name)
        self.enforcement = enforcement or Enforcement()
        self.jobs: dict[str, ProcessJob] = {}
        self._stopping: dict[tuple[str, int], ProcessJob] = {}  # preempted, not exited yet
        # Job -> (attempt, checkpoint) of its last attempt here that was stopped: the next attempt resumes from it
        # (the Launch's figure is the control plane's, which may have extrapolated past what really ran).
        self._stopped_at: dict[str, tuple[int, int]] = {}
        self.drained: str | None = None
        self._socket_dir: str | None = None
        self.socket_path: str | None = None
        self._server: asyncio.AbstractServer | None = None
        self._registered: apb.Registered | None = None  # the control plane's model settings (profilings)
        self._perf: PerformanceModel | None = None
        if not self.enforcement.memory_enforced:
            log.warning("memory limits are not enforced on this machine", node=self.node_name,
                        reason=self.enforcement.memory_reason)

    # --- profiling (Crius §5.1) -------------------------------------------------------

    def _on_registered(self, registered: apb.Registered) -> None:
        super()._on_registered(registered)
        self._registered = registered  # the control plane's model settings, for profilings

    def on_profile(self, profile: apb.Profile) -> None:
        """A stage profiling answered from the performance model: this backend runs real processes on
        no GPU, so the GPU types its node declares are the model's (the gpu backend refuses instead)."""
        registered = self._registered
        if registered is None:
            self.send(apb.AgentMessage(profile_result=refused(profile, self.node_name, self.backend,
                                                              "it is not registered yet")), keep=False)
            return
        self._perf = model_for(registered, self._perf)
        self.send(apb.AgentMessage(profile_result=model_profiling(self._perf, self.cluster, self.node_name,
                                                                  self.backend, profile)), keep=False)

    # --- lifecycle ----------------------------------------------------------------

    async def run(self) -> None:
        await self.serve_workers()
        await super().run()

    async def serve_workers(self) -> None:
        """Open the Unix socket the jobs' workers report on (once; :meth:`run` does it first)."""
        if self._server is None:
            # Unix socket paths are limited to ~108 bytes, so the socket lives in a short temp dir.
            self._socket_dir = tempfile.mkdtemp(prefix="halyard-agent-")  # 0700: the agent's user only
            self.socket_path = os.path.join(self._socket_dir, "agent.sock")
            self._server = await asyncio.start_unix_server(self._on_worker, path=self.socket_path)
            if self.run_as is not None:  # the jobs' user reaches the socket; nobody else does
                os.chown(self._socket_dir, self.run_as.uid, self.run_as.gid)

    async def stop_jobs(self) -> None:
        """The agent is going away: kill what it runs (a killed agent's jobs die with it)."""
        jobs = [*self.jobs.values(), *self._stopping.values()]
        self.jobs.clear()
        self._stopping.clear()
        for job in jobs:
            if job.task is not None:
                job.task.cancel()
            _signal_group(job, signal.SIGKILL)
        for job in jobs:
            if job.process is not None:
                with contextlib.suppress(ProcessLookupError):
                    await job.process.wait()
            if job.output is not None:
                job.output.close()
            _remove_cgroup(job)
        if self._server is not None:
            self._server.close()
            self._server = None
        if self._socket_dir is not None:
            shutil.rmtree(self._socket_dir, ignore_errors=True)
            self._socket_dir = None

    # --- reports ------------------------------------------------------------------

    def running_jobs(self) -> list[apb.RunningJob]:
        return [apb.RunningJob(job_id=j.job_id, attempt=j.attempt, leader=j.leader, iterations_done=j.iterations_done)
                for j in self.jobs.values()]

    def heartbeat(self, now: float) -> apb.Heartbeat:
        busy = sum(len(p.gpus) for j in self.jobs.values() for p in j.allocation.nodes if p.node == self.node_name)
        total = self.cluster.node(self.node_name).gpus if self.cluster is not None else 0
        detail = self.enforcement.describe() + (f"; drained: {self.drained}" if self.drained else "")
        return apb.Heartbeat(cluster_time=now, gpu_utilization=busy / total if total else 0.0, healthy=True,
                             detail=detail)

    def progress_reports(self, now: float) -> list[apb.Progress]:
        speedup = self.clock_params.speedup if self.clock_params is not None else 1.0
        return [apb.Progress(job_id=j.job_id, attempt=j.attempt, iterations_done=j.iterations_done,
                             cluster_time=now, recent_iteration_s=[d * speedup for d in j.recent],
                             time_shift_drift_s=j.drift_s)
                for j in self.jobs.values() if j.leader and j.writer is not None]

    # --- commands -------------------------------------------------------------------

    def on_launch(self, body: apb.Launch) -> None:
        current = self.jobs.get(body.job_id)
        if current is not None and current.attempt == body.attempt:
            return  # a repeated Launch
        try:
            # The control plane checks these at SubmitJob; the agent checks again, as every path it
            # makes for the job must stay under --work-dir whoever sent the Launch.
            check_name(body.job_id, "launch.job_id", MAX_JOB_ID)
            spec = spec_from_pb(body.spec, submit_time=0.0, prefix="launch.spec")
            if spec.job_id != body.job_id:
                raise ValidationError(f"names job {spec.job_id!r}, the launch {body.job_id!r}", field="launch.spec")
            allocation = allocation_from_pb(body.allocation, self.registered_cluster())
        except ValidationError as exc:
            log.error("launch refused", node=self.node_name, job=body.job_id[:MAX_JOB_ID], error=str(exc))
            self.send(apb.AgentMessage(exited=apb.Exited(
                job_id=body.job_id, attempt=body.attempt, status=apb.EXIT_FAILED,
                cluster_time=self.clock.now() if self.clock else 0.0, message=f"launch refused: {exc}")), keep=True)
            return
        if current is not None:  # an older attempt the control plane has moved on from
            self._preempt(current, grace_s=0.0)
        job = ProcessJob(body.job_id, body.attempt, spec, allocation, body.leader, body.iterations_total,
                         iterations_done=body.iterations_done, checkpoint=int(body.iterations_done + 1e-9),
                         time_shift=_shift_of(allocation))
        self.jobs[job.job_id] = job
        if not spec.command:
            self._end(job, apb.EXIT_FAILED, "the job has no command: the process backend runs JobSpec.command "
                                            "(submit it with a command, or use an emulated agent)")
            return
        job.task = asyncio.create_task(self._supervise(job), name=f"job {job.job_id}@{self.node_name}")

    def on_preempt(self, body: apb.Preempt) -> None:
        job = self.jobs.get(body.job_id)
        if job is not None and job.attempt == body.attempt:
            self._preempt(job, body.grace_s)

    def on_reconfigure(self, body: apb.Reconfigure) -> None:
        job = self.jobs.get(body.job_id)
        if job is None or job.attempt != body.attempt:
            return
        if body.restart_attempt:
            self._restart(job, body)
            return
        job.allocation = allocation_from_pb(body.allocation, self.registered_cluster())
        job.leader = body.leader
        share = self._share(job)
        if share is None:
            return
        job.cores = self._pick_cores(share.cpus, exclude=job)
        if job.process is not None:
            _pin_group(job.process.pid, job.cores)
        if job.cgroup is not None:
            _write(job.cgroup / "memory.max", str(share.memory_mb * 1_000_000))
        job.tell({"type": "resources", "cpus": share.cpus, "memory_mb": share.memory_mb})
        log.info("job reconfigured", node=self.node_name, job=job.job_id, cores=job.cores, memory_mb=share.memory_mb,
                 memory_enforced=job.cgroup is not None)

    def _restart(self, job: ProcessJob, body: apb.Reconfigure) -> None:
        """Checkpoint and stop ``job``, then run attempt ``restart_attempt`` on the new allocation."""
        allocation = allocation_from_pb(body.allocation, self.registered_cluster())
        new = ProcessJob(job.job_id, body.restart_attempt, job.spec, allocation, body.leader,
                         body.iterations_total or job.total, iterations_done=float(job.checkpoint),
                         checkpoint=job.checkpoint, time_shift=_shift_of(allocation), follows=job)
        job.restarting = True
        self._preempt(job, body.grace_s or DEFAULT_RESTART_GRACE_S)
        self.jobs[new.job_id] = new
        log.info("job restarting on a new allocation", node=self.node_name, job=job.job_id,
                 attempt=new.attempt, gpus=allocation.num_gpus)
        new.task = asyncio.create_task(self._supervise(new), name=f"job {new.job_id}@{self.node_name}")

    def on_set_time_shift(self, body: apb.SetTimeShift) -> None:
        job = self.jobs.get(body.job_id)
        if job is not None and job.attempt == body.attempt:
            job.time_shift = (body.seconds, body.period_s, body.epoch_s)
            job.tell(_shift_message(job.time_shift))

    def on_drain(self, drain: apb.Drain) -> None:
        self.drained = drain.reason or "drained"
        log.info("node drained", node=self.node_name, reason=drain.reason, running=len(self.jobs))

    # --- running a job ----------------------------------------------------------------

    def _share(self, job: ProcessJob):
        return next((p for p in job.allocation.nodes if p.node == self.node_name), None)

    def _gpus_here(self, job: ProcessJob) -> set[int]:
        share = self._share(job)
        return set(share.gpus) if share else set()

    def _pick_cores(self, count: int, *, exclude: ProcessJob | None = None) -> tuple[int, ...]:
        """``count`` of this machine's cores, least used first (all of them, shared, if it has fewer)."""
        use = dict.fromkeys(self.enforcement.cores, 0)
        for other in self.jobs.values():
            if other is not exclude:
                for core in other.cores:
                    use[core] = use.get(core, 0) + 1
        ranked = sorted(use, key=lambda c: (use[c], c))
        return tuple(sorted(ranked[:max(1, min(count, len(ranked)))]))

    def _environment(self, job: ProcessJob) -> dict[str, str]:
        nodes = job.allocation.node_names
        share = self._share(job)
        rank = nodes.index(self.node_name) if self.node_name in nodes else 0
        master = self.hosts.get(nodes[0], nodes[0]) if nodes else "127.0.0.1"
        port = MASTER_PORT_BASE + zlib.crc32(job.job_id.encode()) % MASTER_PORT_SPAN
        params = self.clock_params
        halyard = {
            "HALYARD_JOB_ID": job.job_id, "HALYARD_ATTEMPT": str(job.attempt), "HALYARD_NODE": self.node_name,
            "HALYARD_RANK": str(rank), "HALYARD_WORLD_SIZE": str(len(nodes)),
            "HALYARD_MASTER_ADDR": master, "HALYARD_MASTER_PORT": str(port),
            "HALYARD_CHECKPOINT_DIR": str(self.work_dir / "checkpoints" / job.job_id),
            "HALYARD_START_ITERATION": str(job.checkpoint), "HALYARD_ITERATIONS_TOTAL": str(job.total),
            "HALYARD_AGENT_SOCKET": self.socket_path or "",
            "HALYARD_TIME_SHIFT_S": repr(job.time_shift[0] if job.time_shift else 0.0),
            "HALYARD_CPUS": str(share.cpus if share else 0), "HALYARD_MEMORY_MB": str(share.memory_mb if share else 0),
            "HALYARD_GPUS": ",".join(str(g) for g in share.gpus) if share else "",
            **_worker_environment(job.allocation, share),
            "RANK": str(rank), "WORLD_SIZE": str(len(nodes)), "MASTER_ADDR": master, "MASTER_PORT": str(port),
            "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1",  # one process per node: the job's share of it
            "OMP_NUM_THREADS": str(len(job.cores) or 1),
        }
        if job.time_shift is not None:  # present = a shift (0 s included)
            halyard["HALYARD_TIME_SHIFT"] = time_shift_env(*job.time_shift)
        if params is not None and params.kind == "scaled":
            halyard["HALYARD_CLOCK"] = clock_env(params.wall_origin_unix_s, params.cluster_origin_s, params.speedup)
        user = {}
        if self.run_as is not None:
            user = {"HOME": self.run_as.home, "USER": self.run_as.name, "LOGNAME": self.run_as.name}
        # An allow-list of the agent's environment, never all of it (jobenv.py): its credentials stay its own.
        inherited = self.env_allow.inherited(os.environ)
        return inherited | user | halyard | dict(job.spec.env) | self.extra_environment(job)

    def extra_environment(self, job: ProcessJob) -> dict[str, str]:
        """What a subclass adds (the gpu backend: CUDA_VISIBLE_DEVICES)."""
        return {}

    def _make_cgroup(self, job: ProcessJob, memory_mb: int) -> Path | None:
        parent = self.enforcement.cgroup_parent
        if parent is None:
            return None
        path = parent / f"halyard-{job.job_id}-{job.attempt}-{self.node_name}".replace("/", "_")
        try:
            path.mkdir(exist_ok=True)
            _write(path / "memory.max", str(memory_mb * 1_000_000))
        except OSError as exc:
            log.warning("cannot create the job's cgroup; memory unenforced", node=self.node_name, job=job.job_id,
                        error=str(exc))
            return None
        return path

    async def _supervise(self, job: ProcessJob) -> None:
        # The control plane frees a preempted job's GPUs at once, but its process may still be
        # checkpointing (at most its grace period): wait for it, as for our own previous attempt,
        # so that no GPU ever holds two jobs' processes.
        mine = self._gpus_here(job)
        for (job_id, _), old in list(self._stopping.items()):
            if job_id == job.job_id or mine & self._gpus_here(old):
                await old.exited.wait()
        if self.jobs.get(job.job_id) is not job:
            return
        if job.follows is not None:  # a restart: resume where the old attempt's on-demand checkpoint ends
            job.checkpoint = job.follows.checkpoint
            job.iterations_done = float(job.checkpoint)
            job.follows = None
        stopped = self._stopped_at.pop(job.job_id, None)
        if stopped is not None and stopped[0] == job.attempt - 1:
            # The attempt just before this one stopped here (a preemption): resume where it really checkpointed.
            # A policy's Preempt ends the attempt at once in the control plane, which therefore never hears
            # this checkpoint and launches from its model's estimate of the progress.
            job.checkpoint = stopped[1]
            job.iterations_done = float(job.checkpoint)
        share = self._share(job)
        job.cores = self._pick_cores(share.cpus if share else 1, exclude=job)
        job.cgroup = self._make_cgroup(job, share.memory_mb) if share else None
        argv = [sys.executable, "-m", "halyard.agent.spawn", "--cpus", ",".join(map(str, job.cores))]
        if job.cgroup is not None:
            argv += ["--cgroup", str(job.cgroup)]
        if self.run_as is not None:
            argv += ["--user", str(self.run_as.uid), "--group", str(self.run_as.gid)]
        argv += ["--", *job.spec.command]
        try:
            job.log_path, job.output = self._job_files(job)
        except (OSError, ValidationError) as exc:
            self._end(job, apb.EXIT_FAILED, f"cannot prepare the job's files under {self.work_dir}: {exc}")
            return
        try:
            job.process = await asyncio.create_subprocess_exec(
                *argv, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT, env=self._environment(job), cwd=self.work_dir,
                start_new_session=True)
        except (OSError, ValueError) as exc:
            job.output.close()
            self._end(job, apb.EXIT_FAILED, f"cannot start {job.spec.command[0]!r}: {exc}")
            return
        job.pump = asyncio.create_task(_pump(job.process.stdout, job.output), name=f"output {job.job_id}")
        log.info("job started", node=self.node_name, job=job.job_id, attempt=job.attempt, pid=job.process.pid,
                 cores=job.cores, memory_enforced=job.cgroup is not None)
        code = await job.process.wait()
        try:  # the rest of its output (a child it left behind may hold the pipe open: not for long)
            async with asyncio.timeout(WORKER_DRAIN_S):
                await job.pump
        except TimeoutError:
            log.warning("the job's output pipe stayed open after it exited", node=self.node_name, job=job.job_id)
        last_words = job.output.tail(OUTPUT_TAIL_CHARS)
        job.output.close()
        if job.writer is not None:  # read what the worker said last ("done") before judging the exit
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(WORKER_DRAIN_S):
                    await job.disconnected.wait()
        if job.stopping:
            self._end(job, apb.EXIT_PREEMPTED, "preempted")
        elif code == 0 and job.finished:
            job.iterations_done = job.checkpoint = job.total
            self._end(job, apb.EXIT_COMPLETED, "")
        else:
            how = f"exit code {code}" if code >= 0 else f"killed by {signal.Signals(-code).name}"
            if code == 0:
                how += f" before its last iteration ({job.iterations_done:g} of {job.total})"
            self._end(job, apb.EXIT_FAILED, f"{how}: {_tail(last_words)}")

    def inside_work_dir(self, *parts: str) -> Path:
        """``work_dir/parts...``, refused (ValidationError) unless it resolves to a path under ``work_dir``."""
        path = self.work_dir.joinpath(*parts)
        resolved = path.resolve()
        if resolved == self.work_dir or not resolved.is_relative_to(self.work_dir):
            raise ValidationError(f"{path} leaves the work directory {self.work_dir}", field="job_id")
        return path

    def _job_files(self, job: ProcessJob):
        """The job's checkpoint directory (made, and given to the run-as user) and its log file, both checked
        to lie under ``work_dir`` and then made and opened step by step through directory descriptors that
        follow no link (:func:`joblogs.open_dir`): a link a job plants meanwhile fails the call (ELOOP),
        it never leads the agent outside ``work_dir``."""
        self.inside_work_dir("logs")
        self.inside_work_dir("checkpoints", job.job_id)
        log_path = self._log_path(job.job_id, job.attempt)
        self.work_dir.mkdir(parents=True, exist_ok=True)
        checkpoints = open_dir(self.work_dir, "checkpoints", job.job_id, create=True)
        try:
            if self.run_as is not None:
                os.fchown(checkpoints, self.run_as.uid, self.run_as.gid)
        finally:
            os.close(checkpoints)
        logs = open_dir(self.work_dir, "logs", create=True)
        try:
            return log_path, CappedLog(log_path, self.log_max_bytes, dir_fd=logs)
        finally:
            os.close(logs)

    def _log_path(self, job_id: str, attempt: int) -> Path:
        return self.inside_work_dir("logs", f"{job_id}-{attempt}-{self.node_name}.log".replace("/", "_"))

    def on_read_log(self, body: apb.ReadLog) -> None:
        """A piece of an attempt's output; complete once the attempt has ended here (its output is whole)."""
        answer = apb.LogData(request_id=body.request_id)
        try:
            check_name(body.job_id, "read_log.job_id", MAX_JOB_ID)
            path = self._log_path(body.job_id, body.attempt)
            logs = open_dir(self.work_dir, "logs")  # no link followed on the way (nor at the files)
            try:
                answer.offset, answer.data = read_log(path, body.offset, min(body.max_bytes or READ_MAX_BYTES,
                                                                             READ_MAX_BYTES), dir_fd=logs)
            finally:
                os.close(logs)
        except FileNotFoundError:
            answer.error = f"no output of job {body.job_id!r} attempt {body.attempt} on node {self.node_name}"
        except (OSError, ValidationError) as exc:
            answer.error = f"cannot read the output on node {self.node_name}: {exc}"
        else:
            running = [j for j in (*self.jobs.values(), *self._stopping.values())
                       if j.job_id == body.job_id and j.attempt == body.attempt and not j.exited.is_set()]
            answer.complete = not running
        self.send(apb.AgentMessage(log_data=answer), keep=False)

    def _end(self, job: ProcessJob, status: int, message: str) -> None:
        job.exited.set()
        _remove_cgroup(job)
        self._stopping.pop((job.job_id, job.attempt), None)
        if self.jobs.get(job.job_id) is job:
            del self.jobs[job.job_id]
        if job.writer is not None:
            job.writer.close()
        log.info("job exited", node=self.node_name, job=job.job_id, attempt=job.attempt,
                 status=apb.ExitStatus.Name(status), checkpoint=job.checkpoint, message=message)
        if status == apb.EXIT_PREEMPTED and not job.restarting:
            self._stopped_at[job.job_id] = (job.attempt, job.checkpoint)
        # The leader reports the job's end; any node reports a failure of its own part. An attempt
        # stopped for a restart reports nothing: the job goes on as the newer attempt.
        if job.restarting and status == apb.EXIT_PREEMPTED:
            return
        if status == apb.EXIT_COMPLETED and not job.leader:
            self.part_finished(job.job_id, job.attempt, job.checkpoint)
        if job.leader or status == apb.EXIT_FAILED:
            self.send(apb.AgentMessage(exited=apb.Exited(
                job_id=job.job_id, attempt=job.attempt, status=status,
                cluster_time=self.clock.now() if self.clock else 0.0, checkpoint_iteration=job.checkpoint,
                message=message)), keep=status != apb.EXIT_PREEMPTED)

    def _preempt(self, job: ProcessJob, grace_s: float) -> None:
        if self.jobs.get(job.job_id) is job:
            del self.jobs[job.job_id]
        job.stopping = True
        if job.process is None:  # not started yet (waiting for an older attempt), or refused
            if job.task is not None:
                job.task.cancel()
            self._end(job, apb.EXIT_PREEMPTED, "preempted before it started")
            return
        self._stopping[(job.job_id, job.attempt)] = job
        job.tell({"type": "preempt", "grace_s": grace_s})
        _signal_group(job, signal.SIGTERM if grace_s > 0 else signal.SIGKILL)
        if grace_s > 0:
            asyncio.get_running_loop().call_later(grace_s, self._kill_if_alive, job)

    def _kill_if_alive(self, job: ProcessJob) -> None:
        if not job.exited.is_set():
            log.warning("job did not stop within its grace period; killing it", node=self.node_name, job=job.job_id)
            _signal_group(job, signal.SIGKILL)

    # --- the worker socket --------------------------------------------------------------

    async def _on_worker(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        job: ProcessJob | None = None
        try:
            while line := await reader.readline():
                try:
                    message = json.loads(line)
                    kind = message.get("type")
                    if kind == "hello":
                        key = (str(message.get("job_id")), int(message.get("attempt", 0)))
                        job = self.jobs.get(key[0]) if key not in self._stopping else self._stopping[key]
                        if job is None or job.attempt != key[1]:
                            log.warning("a worker of no job of ours connected", node=self.node_name,
                                        hello=str(message)[:MAX_JOB_ID])
                            return
                        job.writer = writer
                        if job.time_shift is not None:
                            job.tell(_shift_message(job.time_shift))
                    elif job is None:
                        return
                    else:
                        self._worker_said(job, kind, message)
                except (ValueError, KeyError, TypeError, AttributeError) as exc:  # this message only: the next may do
                    log.warning("bad message from a worker", node=self.node_name, error=str(exc)[:MAX_JOB_ID])
        except ConnectionError:
            pass
        finally:
            writer.close()
            if job is not None:
                job.disconnected.set()

    @staticmethod
    def _worker_said(job: ProcessJob, kind: object, message: dict) -> None:
        """A report of the job's worker (its own numbers: finite, or the message is refused)."""
        if kind == "iteration":
            index, duration = _finite(message["index"]), _finite(message.get("duration_s", 0.0))
            drift = _finite(message["drift_s"]) if message.get("drift_s") is not None else None
            job.iterations_done = index
            job.recent.append(duration)
            if drift is not None:
                job.drift_s = drift
        elif kind == "checkpoint":
            job.checkpoint = int(message["iteration"])
        elif kind == "done":
            job.finished = int(message.get("iterations", 0)) >= job.total
        elif kind == "preempted":
            job.checkpoint = int(message.get("checkpoint", job.checkpoint))


async def _pump(stream: asyncio.StreamReader | None, output: CappedLog) -> None:
    """Copy a job's output pipe into its capped log until the pipe closes."""
    if stream is None:
        return
    while chunk := await stream.read(1 << 16):
        try:
            output.write(chunk)
        except OSError as exc:  # a full disk: keep draining the pipe, or the job blocks on its writes
            log.warning("cannot write the job's output", path=str(output.path), error=str(exc))


def _finite(value: object) -> float:
    """A number a job's worker sent, as a float; ValueError for NaN or an infinity (json reads both), which
    would make every Progress of the job out of range at the control plane."""
    if not isinstance(value, int | float | str):  # json's other values (null, lists, objects)
        raise TypeError(f"not a number: {type(value).__name__}")
    number = float(value)
    if not math.isfinite(number):
        raise ValueError(f"not a finite number: {value!r}")
    return number


def _shift_of(allocation: Allocation) -> tuple[float, float, float] | None:
    """(seconds, period_s, epoch_s) of the allocation's time-shift; None without one (0 s is one)."""
    if not allocation.has_time_shift:
        return None
    return allocation.time_shift_s, allocation.time_shift_period_s, allocation.time_shift_epoch_s


def _shift_message(shift: tuple[float, float, float]) -> dict:
    seconds, period_s, epoch_s = shift
    return {"type": "time_shift", "seconds": seconds, "period_s": period_s or None, "epoch_s": epoch_s}


def _worker_environment(allocation: Allocation, share: NodeAllocation | None) -> dict[str, str]:
    """The job's size and its logical workers (EasyScale's ESTs, §3.2) as this rank sees them.

    A job without logical workers runs one per GPU. ``HALYARD_WORKER_OFFSET`` is the
    global index of this rank's first logical worker: ranks hold consecutive ones in
    allocation order, so a worker's index (its data shard, its RNG stream) does not
    depend on how many GPUs the job holds.
    """
    def counts(part: NodeAllocation) -> tuple[int, ...]:
        return part.workers or (1,) * len(part.gpus)

    offset = 0
    for part in allocation.nodes:
        if share is not None and part.node == share.node:
            break
        offset += sum(counts(part))
    mine = counts(share) if share is not None else ()
    return {
        "HALYARD_NUM_GPUS": str(allocation.num_gpus),
        "HALYARD_LOGICAL_WORKERS": str(allocation.logical_workers or allocation.num_gpus),
        "HALYARD_RANK_WORKERS": str(sum(mine)),
        "HALYARD_GPU_WORKERS": ",".join(str(c) for c in mine),
        "HALYARD_WORKER_OFFSET": str(offset),
    }


@dataclass(frozen=True)
class RunAs:
    """The unprivileged user jobs run as (``--run-as``): the agent stays root, each job drops to this user."""

    name: str
    uid: int
    gid: int
    home: str

    @classmethod
    def lookup(cls, who: str) -> RunAs:
        try:
            entry = pwd.getpwuid(int(who)) if who.isdigit() else pwd.getpwnam(who)
        except KeyError:
            raise ValidationError(f"no user {who!r} on this machine", field="--run-as") from None
        if entry.pw_uid == 0:
            raise ValidationError("jobs must not run as root", field="--run-as")
        if os.geteuid() != 0 and entry.pw_uid != os.geteuid():
            raise ValidationError(f"the agent must run as root to start jobs as {entry.pw_name!r}", field="--run-as")
        return cls(entry.pw_name, entry.pw_uid, entry.pw_gid, entry.pw_dir)


def _signal_group(job: ProcessJob, sig: signal.Signals) -> None:
    if job.process is not None and job.process.returncode is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(job.process.pid, sig)  # start_new_session: the group is the job's


def _pin_group(pgid: int, cores: tuple[int, ...]) -> None:
    """Re-pin every thread of every process in the job's process group."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = _read(Path("/proc", entry, "stat"))
            if not stat or int(stat.rsplit(")", 1)[1].split()[2]) != pgid:
                continue
            for tid in os.listdir(f"/proc/{entry}/task"):
                with contextlib.suppress(OSError):
                    os.sched_setaffinity(int(tid), cores)
        except (OSError, ValueError, IndexError):
            continue


def _write(path: Path, value: str) -> None:
    path.write_text(value, encoding="ascii")


def _remove_cgroup(job: ProcessJob) -> None:
    if job.cgroup is not None:
        with contextlib.suppress(OSError):
            job.cgroup.rmdir()
        job.cgroup = None


def _tail(text: str) -> str:
    """A failed job's last output for its Exited.message, on one line."""
    return text.strip()[-OUTPUT_TAIL_CHARS:].replace("\n", " | ") or "(no output)"
