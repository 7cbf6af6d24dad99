"""What an agent sends is range-checked like a client's request (docs/security.md, "Agent reports").

A Register is refused whole (INVALID_ARGUMENT naming the field) before anything of it is kept;
a report later on the stream is refused on its own (the control plane logs and counts it by
field, :meth:`AgentSessions.refused`). Numbers must be finite and in range; free text is
cleaned of escape sequences and control characters and cut (:func:`limits.clean_text`) rather
than refused, since what it says (a health fault, a process's last words) matters.
"""

from __future__ import annotations

import re
import string

from halyard.datamodel import ValidationError
from halyard.datamodel import limits as lim
from halyard.v1 import agent_service_pb2 as apb

_INDEX = re.compile(r"\[[^]]*\]")


def refused_field(field: str) -> str:
    """A refused field as a metric label: indices dropped (``register.running[3].job_id`` ->
    ``register.running[].job_id``), so an agent cannot create series."""
    return _INDEX.sub("[]", field)


def _check_job_ref(job_id: str, field: str) -> None:
    """A job id an agent names: at most a job id's length (a longer one is no job of ours, and would be logged)."""
    if len(job_id) > lim.MAX_JOB_ID:
        raise ValidationError(f"is {len(job_id)} characters long; at most {lim.MAX_JOB_ID} allowed", field=field)


def check_register(register: apb.Register) -> None:
    """A Register is range-checked as a client's request is (docs/security.md, "Input limits"): the agent is
    refused with INVALID_ARGUMENT naming the field, before anything of it is kept."""
    lim.check_name(register.backend, "register.backend", lim.MAX_AGENT_BACKEND, required=False)
    lim.check_text(register.version, "register.version", lim.MAX_AGENT_VERSION)
    lim.check_text(register.instance, "register.instance", lim.MAX_AGENT_INSTANCE)
    digest = register.cluster_digest
    if digest and not (len(digest) <= lim.MAX_CLUSTER_DIGEST and all(c in string.hexdigits for c in digest)):
        raise ValidationError(f"must be a SHA-256 in hex (at most {lim.MAX_CLUSTER_DIGEST} characters)",
                              field="register.cluster_digest")
    if len(register.running) > lim.MAX_REPORTED_JOBS:
        raise ValidationError(f"has {len(register.running)} entries; at most {lim.MAX_REPORTED_JOBS} allowed",
                              field="register.running")
    for i, job in enumerate(register.running):
        lim.check_text(job.job_id, f"register.running[{i}].job_id", lim.MAX_JOB_ID)
        lim.check_number(job.iterations_done, f"register.running[{i}].iterations_done", 0.0, lim.MAX_ITERATIONS)


def check_report(msg: apb.AgentMessage, kind: str | None) -> None:
    """An agent's numbers are finite and in range before they touch a record (a NaN would poison the store),
    and its free text is cleaned and cut (:func:`limits.clean_text`) before it is kept or logged."""
    if kind == "heartbeat":
        h = msg.heartbeat
        h.detail = lim.clean_text(h.detail, lim.MAX_HEALTH_DETAIL)
        lim.check_seconds(h.cluster_time, "heartbeat.cluster_time", lim.MAX_TIME_S)
        lim.check_number(h.gpu_utilization, "heartbeat.gpu_utilization", 0.0, 1.0)
    elif kind == "progress":
        p = msg.progress
        _check_job_ref(p.job_id, "progress.job_id")
        lim.check_seconds(p.iterations_done, "progress.iterations_done", lim.MAX_ITERATIONS)
        lim.check_seconds(p.cluster_time, "progress.cluster_time", lim.MAX_TIME_S)
        lim.check_seconds(p.compute_s, "progress.compute_s", lim.MAX_DURATION_S)
        lim.check_seconds(p.communication_s, "progress.communication_s", lim.MAX_DURATION_S)
        if len(p.recent_iteration_s) > lim.MAX_RECENT_ITERATIONS:
            raise ValidationError(f"has {len(p.recent_iteration_s)} entries; at most {lim.MAX_RECENT_ITERATIONS} "
                                  "allowed", field="progress.recent_iteration_s")
        for x in p.recent_iteration_s:
            lim.check_seconds(x, "progress.recent_iteration_s", lim.MAX_DURATION_S)
        if p.HasField("time_shift_drift_s"):
            lim.check_seconds(p.time_shift_drift_s, "progress.time_shift_drift_s", lim.MAX_DURATION_S,
                              low=-lim.MAX_DURATION_S)
    elif kind == "exited":
        e = msg.exited
        _check_job_ref(e.job_id, "exited.job_id")
        lim.check_seconds(e.cluster_time, "exited.cluster_time", lim.MAX_TIME_S)
        lim.check_int(e.checkpoint_iteration, "exited.checkpoint_iteration", 0, lim.MAX_ITERATIONS)
        if len(e.message) > lim.MAX_EXIT_MESSAGE_BYTES:
            raise ValidationError(f"is {len(e.message)} characters long; at most {lim.MAX_EXIT_MESSAGE_BYTES} "
                                  "allowed", field="exited.message")
        e.message = lim.clean_text(e.message, lim.MAX_EXIT_MESSAGE_BYTES)
    elif kind == "profile_result":
        r = msg.profile_result
        _check_job_ref(r.job_id, "profile_result.job_id")
        r.error = lim.clean_text(r.error, lim.MAX_AGENT_TEXT)
    elif kind == "leaving":
        msg.leaving.reason = lim.clean_text(msg.leaving.reason, lim.MAX_AGENT_TEXT)
