"""Crius' stage profilings on a live control plane (papers/crius-cell-scheduling.txt §5.1, §6.1).

:class:`AgentProfiles` is the :class:`~halyard.policies.crius_profiles.ProfileSource` of the
gRPC control plane: each profiling a policy asks for goes to a connected agent of the Cell's
GPU type as ``Profile`` (the Cell's GPUs and the plan, every stage data-parallel-only or
tensor-parallel-only) and comes back as ``ProfileResult``; answers are cached per profiling
(model, batch, GPU type, GPU count, stage plan) for the control plane's life. Crius profiles
the Cells of a new job before scheduling it (§6.1: "Crius requires a single device to profile
the job on each kind of GPU, profilings on heterogeneous GPUs are done in parallel"), so the
submission path awaits them (:meth:`ControlPlane.prepare_profiles`) and the job's first pass
finds them answered -- replay's emulated agents answer from the simulator's model, so replay
schedules what ``simulate`` does, and profiling adds no event. A pass that still misses one
(an agent slow to answer, a restart) raises ``ProfilesPending`` inside the policy, which
holds back only the job whose Cells need it (the others are scheduled); the profilings it
missed are asked after the pass and their answers run another pass.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING

import structlog

from halyard.datamodel import HalyardError, StageProfile, ValidationError
from halyard.policies.crius_profiles import ProfileRequest, ProfilesPending
from halyard.scheduling.state import StoreError
from halyard.v1 import agent_service_pb2 as apb
from halyard.wire import allocation_to_pb, spec_to_pb, stage_profile_from_pb

if TYPE_CHECKING:
    from halyard.controlplane.service import ControlPlane

log = structlog.get_logger("halyard.controlplane")

# Wall seconds an agent has to answer a Profile (as LogRelay's AGENT_ANSWER_S for a ReadLog); one
# not answered by then is asked of the type's next agent.
PROFILE_ANSWER_S = 10.0
# Wall seconds a profiling that no agent of its type answered stays refused (its Cell left out) before a
# pass asks for it again: long enough not to re-ask on every pass, short enough for a restarted agent.
PROFILE_RETRY_S = 60.0

_Key = tuple[object, ...]


class AgentProfiles:
    """Profilings asked of agents over their streams, matched to answers by request id and node."""

    def __init__(self, cp: ControlPlane) -> None:
        self.cp = cp
        self._ids = itertools.count(1)
        self._answers: dict[_Key, tuple[StageProfile, ...] | None] = {}  # None: the agent cannot profile
        self.errors: dict[_Key, str] = {}  # why, for each profiling an agent refused
        self._asked: dict[_Key, asyncio.Future[None]] = {}
        self._waiting: dict[int, tuple[str, asyncio.Future[apb.ProfileResult]]] = {}
        self._missed: dict[_Key, ProfileRequest] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._retry_at: dict[_Key, float] = {}  # profilings no agent answered: when to ask again (monotonic)
        self.exchanged = 0  # Profile / ProfileResult round trips completed

    # --- the ProfileSource a pass reads (synchronous) ------------------------------

    def stage_profiles(self, request: ProfileRequest) -> tuple[StageProfile, ...] | None:
        key = request.key
        if key in self._retry_at and time.monotonic() >= self._retry_at[key]:  # unanswered a while ago: ask again
            del self._retry_at[key], self._answers[key], self.errors[key]
        if key in self._answers:
            return self._answers[key]
        self._missed.setdefault(key, request)
        # The pass stops at its first miss: ask for all of this job's profilings at once, not one a pass.
        for other in self.cp.core.preparations(request.spec):
            if other.key not in self._answers:
                self._missed.setdefault(other.key, other)
        raise ProfilesPending(f"{request.spec.model} on {request.allocation.num_gpus} {request.gpu_type} GPU(s), "
                              f"{len(request.allocation.stages)} stage(s)")

    def answered(self, request: ProfileRequest) -> bool:
        """Whether an agent answered ``request`` (with stages or a refusal)."""
        return request.key in self._answers

    def cached(self, request: ProfileRequest) -> tuple[StageProfile, ...] | None:
        """The answer held for ``request`` (None if none or refused; :attr:`errors` says which)."""
        return self._answers.get(request.key)

    # --- the exchange ------------------------------------------------------------

    async def fetch(self, requests: Iterable[ProfileRequest]) -> None:
        """Ask for every profiling not answered yet, all at once; return when each is answered, refused
        or timed out (a timed-out one stays unanswered)."""
        waits = []
        for request in requests:
            key = request.key
            if key in self._answers:
                continue
            asked = self._asked.get(key)
            if asked is None:
                asked = self._asked[key] = asyncio.ensure_future(self._exchange(request))
            waits.append(asked)
        if waits:
            await asyncio.gather(*(asyncio.shield(w) for w in waits))

    async def _exchange(self, request: ProfileRequest) -> None:
        """Ask the type's agents in turn until one answers; if none does, the profiling is refused for
        ``PROFILE_RETRY_S`` (the Cell is left out meanwhile, and other jobs' passes go on) and then asked
        again, so one absent or hung agent cannot stall the policy."""
        key = request.key
        tried: list[str] = []
        try:
            while (node := self._agent_for(request.gpu_type, tried)) is not None:
                tried.append(node)
                request_id = next(self._ids)
                answer: asyncio.Future[apb.ProfileResult] = asyncio.get_running_loop().create_future()
                self._waiting[request_id] = (node, answer)
                try:
                    spec = request.spec
                    self.cp.sessions[node].send(profile=apb.Profile(
                        job_id=spec.job_id, spec=spec_to_pb(spec), request_id=request_id,
                        allocation=allocation_to_pb(request.allocation)))
                    async with asyncio.timeout(PROFILE_ANSWER_S):
                        result = await answer
                except TimeoutError:
                    log.warning("profile not answered in time", node=node, after_s=PROFILE_ANSWER_S,
                                model=request.spec.model, gpu_type=request.gpu_type)
                    continue
                finally:
                    self._waiting.pop(request_id, None)
                self._take(key, request, node, result)
                return
            why = (f"no agent of GPU type {request.gpu_type} answered" + (f" (asked {', '.join(tried)})" if tried
                                                                           else " (none connected)"))
            log.warning("profiling not answered; retried later", model=request.spec.model,
                        gpu_type=request.gpu_type, retry_after_s=PROFILE_RETRY_S, why=why)
            self._answers[key], self.errors[key] = None, why
            self._retry_at[key] = time.monotonic() + PROFILE_RETRY_S
        finally:
            self._asked.pop(key, None)

    def _take(self, key: _Key, request: ProfileRequest, node: str, result: apb.ProfileResult) -> None:
        if not result.error:
            try:
                stages = tuple(stage_profile_from_pb(s, f"profile_result.stages[{i}]")
                               for i, s in enumerate(result.stages))
                if len(stages) != len(request.allocation.stages):
                    raise ValidationError(f"answers {len(stages)} stages for a plan of "
                                          f"{len(request.allocation.stages)}", field="profile_result.stages")
                self._answers[key] = stages
                self.exchanged += 1
                return
            except HalyardError as exc:
                result = apb.ProfileResult(error=f"node {node}'s agent sent a bad profile: {exc}")
        log.warning("profiling refused", node=node, model=request.spec.model, gpu_type=request.gpu_type,
                    error=result.error)
        self._answers[key] = None
        self.errors[key] = result.error
        self.exchanged += 1

    def deliver(self, node: str, result: apb.ProfileResult) -> None:
        """An agent's answer; one for a request sent to another node, or no longer awaited, is dropped."""
        waiting = self._waiting.get(result.request_id)
        if waiting is not None and waiting[0] == node and not waiting[1].done():
            waiting[1].set_result(result)

    def _agent_for(self, gpu_type: str, tried: Iterable[str] = ()) -> str | None:
        """The first node of ``gpu_type`` in cluster order whose agent is connected and heard from (not
        held silent by the lost-agent guard), other than ``tried`` (deterministic)."""
        sessions, skip = self.cp.sessions, set(tried)
        for n in self.cp.cluster.nodes:
            session = sessions.get(n.name)
            if (n.gpu_type == gpu_type and n.name not in skip and session is not None and not session.closed
                    and not session.silent):
                return n.name
        return None

    # --- after a pass --------------------------------------------------------------

    def ask_missed(self) -> None:
        """Ask for the profilings the last pass missed; once they are in, run another pass."""
        if not self._missed:
            return
        requests = list(self._missed.values())
        self._missed.clear()
        task = asyncio.get_running_loop().create_task(self._fetch_then_pass(requests))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _fetch_then_pass(self, requests: list[ProfileRequest]) -> None:
        await self.fetch(requests)
        if any(r.key in self._answers for r in requests):
            try:
                self.cp.profiles_answered()
            except StoreError:
                return  # fatal: persist has stopped the control plane
            except Exception as exc:  # a policy bug: logged and said on /healthz here, since no one awaits this task
                self.cp.pass_failed(exc, "the pass after profilings arrived failed")
