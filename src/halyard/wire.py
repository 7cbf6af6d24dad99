"""Conversions between the data model and the ``halyard.v1`` protocol messages.

Incoming messages are validated here: a bad field raises
:class:`ValidationError` naming it (``spec.num_gpus``, ``allocation.nodes[1].gpus``),
which the servers turn into INVALID_ARGUMENT. Shared by the control plane and
the agents, so both speak the same mapping.
"""

from __future__ import annotations

import math
from types import MappingProxyType

from halyard.datamodel import (
    STAGE_PROFILE_FIELDS,
    Allocation,
    Cluster,
    EventKind,
    JobEvent,
    JobSpec,
    JobState,
    Node,
    NodeAllocation,
    Parallelism,
    StagePlan,
    StageProfile,
    ValidationError,
)
from halyard.datamodel import limits as lim
from halyard.v1 import agent_service_pb2 as apb
from halyard.v1 import types_pb2 as pb

_STATE_TO_PB = {s: pb.JobState.Value(s.value) for s in JobState}
_STATE_FROM_PB = {v: k for k, v in _STATE_TO_PB.items()}


def state_to_pb(state: JobState) -> int:
    return _STATE_TO_PB[state]


def state_from_pb(value: int, field: str = "state") -> JobState:
    try:
        return _STATE_FROM_PB[value]
    except KeyError:
        raise ValidationError(f"unknown job state {value}", field=field) from None


def spec_to_pb(spec: JobSpec) -> pb.JobSpec:
    msg = pb.JobSpec(
        job_id=spec.job_id, tenant=spec.tenant, user=spec.user, model=spec.model, num_gpus=spec.num_gpus,
        iterations=spec.iterations, duration_s=spec.duration_s or 0.0, batch_size=spec.batch_size,
        gpu_type=spec.gpu_type or "", min_gpus=spec.min_gpus or 0, max_gpus=spec.max_gpus or 0,
        priority=spec.priority, command=list(spec.command), env=dict(spec.env),
        logical_workers=spec.logical_workers,
    )
    if spec.parallelism is not None:
        p = spec.parallelism
        msg.parallelism.CopyFrom(pb.Parallelism(data=p.data, tensor=p.tensor, pipeline=p.pipeline))
    if spec.deadline is not None:
        msg.deadline = spec.deadline - spec.submit_time  # on the wire: seconds after submission
    return msg


def check_spec_strings(msg: pb.JobSpec, prefix: str = "spec") -> None:
    """The names, ``command`` and ``env`` of a job arriving over the wire, within
    :mod:`halyard.datamodel.limits`; raises :class:`ValidationError` naming ``prefix.field``."""
    lim.check_name(msg.job_id, f"{prefix}.job_id", lim.MAX_JOB_ID)
    lim.check_name(msg.tenant, f"{prefix}.tenant", lim.MAX_TENANT, required=False)
    lim.check_text(msg.user, f"{prefix}.user", lim.MAX_USER)
    lim.check_text(msg.model, f"{prefix}.model", lim.MAX_MODEL)
    lim.check_name(msg.gpu_type, f"{prefix}.gpu_type", lim.MAX_GPU_TYPE, required=False)
    lim.check_command(msg.command, f"{prefix}.command")
    lim.check_env(dict(msg.env), f"{prefix}.env")


def spec_from_pb(msg: pb.JobSpec, *, submit_time: float, prefix: str = "spec") -> JobSpec:
    """A validated :class:`JobSpec`; errors name ``prefix.field``."""
    check_spec_strings(msg, prefix)
    if msg.duration_s and not math.isfinite(msg.duration_s):
        raise ValidationError("must be finite", field=f"{prefix}.duration_s")
    if msg.HasField("deadline"):
        lim.check_seconds(msg.deadline, f"{prefix}.deadline", lim.MAX_DEADLINE_S)
    parallelism = None
    if msg.HasField("parallelism"):
        p = msg.parallelism
        parallelism = Parallelism(data=p.data or 1, tensor=p.tensor or 1, pipeline=p.pipeline or 1)
    try:
        return JobSpec(
            job_id=msg.job_id, submit_time=submit_time, model=msg.model, num_gpus=msg.num_gpus,
            iterations=msg.iterations, batch_size=msg.batch_size, tenant=msg.tenant or "default",
            user=msg.user, gpu_type=msg.gpu_type or None, min_gpus=msg.min_gpus or None,
            max_gpus=msg.max_gpus or None, parallelism=parallelism, priority=msg.priority,
            deadline=submit_time + msg.deadline if msg.HasField("deadline") else None,
            duration_s=msg.duration_s or None, command=tuple(msg.command),
            env=MappingProxyType(dict(msg.env)), logical_workers=msg.logical_workers,
        )
    except ValidationError as exc:
        raise ValidationError(exc.message, field=f"{prefix}.{exc.field}" if exc.field else prefix) from None


def allocation_to_pb(allocation: Allocation) -> pb.Allocation:
    msg = pb.Allocation(
        nodes=[pb.NodeAllocation(node=p.node, gpus=list(p.gpus), cpus=p.cpus, memory_mb=p.memory_mb,
                                 workers=list(p.workers)) for p in allocation.nodes],
        time_shift_s=allocation.time_shift_s,
        stages=[pb.StagePlan(gpus=s.gpus, data=s.data, tensor=s.tensor) for s in allocation.stages],
    )
    if allocation.has_time_shift:  # presence: a shift of 0 s is a real shift
        msg.time_shift.CopyFrom(pb.TimeShift(seconds=allocation.time_shift_s,
                                             period_s=allocation.time_shift_period_s,
                                             epoch_s=allocation.time_shift_epoch_s))
    return msg


def allocation_from_pb(msg: pb.Allocation, cluster: Cluster, prefix: str = "allocation") -> Allocation:
    parts = []
    for i, p in enumerate(msg.nodes):
        if not cluster.has_node(p.node):
            raise ValidationError(f"unknown node {p.node!r}", field=f"{prefix}.nodes[{i}].node")
        try:
            parts.append(NodeAllocation(p.node, tuple(p.gpus), p.cpus, p.memory_mb, tuple(p.workers)))
        except ValueError as exc:
            raise ValidationError(str(exc), field=f"{prefix}.nodes[{i}]") from None
    stages = []
    for i, s in enumerate(msg.stages):
        try:
            stages.append(StagePlan(s.gpus, s.data or 1, s.tensor or 1))
        except ValueError as exc:
            raise ValidationError(str(exc), field=f"{prefix}.stages[{i}]") from None
    shift = msg.time_shift
    if msg.HasField("time_shift") and not all(math.isfinite(x) and x >= 0.0
                                              for x in (shift.seconds, shift.period_s, shift.epoch_s)):
        raise ValidationError("seconds, period_s and epoch_s must be finite numbers >= 0",
                              field=f"{prefix}.time_shift")
    try:
        if msg.HasField("time_shift"):
            return Allocation(tuple(parts), stages=tuple(stages)).with_time_shift(shift.seconds, shift.period_s,
                                                                                 shift.epoch_s)
        return Allocation(tuple(parts), time_shift_s=msg.time_shift_s, stages=tuple(stages))  # an older sender
    except ValueError as exc:
        raise ValidationError(str(exc), field=prefix) from None


def node_to_pb(node: Node) -> pb.NodeSpec:
    return pb.NodeSpec(name=node.name, rack=node.rack, gpu_type=node.gpu_type, gpus=node.gpus, cpus=node.cpus,
                       memory_mb=node.memory_mb, fabric=node.fabric.value, fabric_gbyte_s=node.fabric_gbyte_s,
                       nic_gbyte_s=node.nic_gbyte_s)


def event_kind_to_pb(kind: EventKind) -> int:
    """The typed kind of an event (EVENT_KIND_UNSPECIFIED for a kind the enum lacks: ``kind`` still says it)."""
    value = pb.EventKind.DESCRIPTOR.values_by_name.get(f"EVENT_{kind.value}")
    return value.number if value is not None else pb.EVENT_KIND_UNSPECIFIED


def event_to_pb(event: JobEvent) -> pb.JobEvent:
    return pb.JobEvent(seq=event.seq, time=event.time, job_id=event.job_id, kind=event.kind.value,
                       event_kind=event_kind_to_pb(event.kind), state=state_to_pb(event.state),
                       detail=event.detail)


def stage_profile_to_pb(stage: StageProfile) -> apb.StageProfile:
    return apb.StageProfile(**{name: getattr(stage, name) for name in STAGE_PROFILE_FIELDS})


def stage_profile_from_pb(msg: apb.StageProfile, field: str = "stages") -> StageProfile:
    """A stage of a ProfileResult; a degree below 1 or a figure that is negative or not finite names the field."""
    try:
        return StageProfile(**{name: getattr(msg, name) for name in STAGE_PROFILE_FIELDS})
    except ValueError as exc:
        raise ValidationError(str(exc), field=field) from None
