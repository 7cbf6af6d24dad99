from halyard.v1 import types_pb2 as _types_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class GetClusterRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class NodeRequest(_message.Message):
    __slots__ = ("node", "reason")
    NODE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    node: str
    reason: str
    def __init__(self, node: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class NodeStatus(_message.Message):
    __slots__ = ("spec", "connected", "drained", "free_gpus", "free_cpus", "free_memory_mb", "drain_reason", "gpu_utilization", "backend")
    SPEC_FIELD_NUMBER: _ClassVar[int]
    CONNECTED_FIELD_NUMBER: _ClassVar[int]
    DRAINED_FIELD_NUMBER: _ClassVar[int]
    FREE_GPUS_FIELD_NUMBER: _ClassVar[int]
    FREE_CPUS_FIELD_NUMBER: _ClassVar[int]
    FREE_MEMORY_MB_FIELD_NUMBER: _ClassVar[int]
    DRAIN_REASON_FIELD_NUMBER: _ClassVar[int]
    GPU_UTILIZATION_FIELD_NUMBER: _ClassVar[int]
    BACKEND_FIELD_NUMBER: _ClassVar[int]
    spec: _types_pb2.NodeSpec
    connected: bool
    drained: bool
    free_gpus: int
    free_cpus: int
    free_memory_mb: int
    drain_reason: str
    gpu_utilization: float
    backend: str
    def __init__(self, spec: _Optional[_Union[_types_pb2.NodeSpec, _Mapping]] = ..., connected: _Optional[bool] = ..., drained: _Optional[bool] = ..., free_gpus: _Optional[int] = ..., free_cpus: _Optional[int] = ..., free_memory_mb: _Optional[int] = ..., drain_reason: _Optional[str] = ..., gpu_utilization: _Optional[float] = ..., backend: _Optional[str] = ...) -> None: ...

class ClusterStatus(_message.Message):
    __slots__ = ("name", "nodes", "cluster_time", "total_gpus", "free_gpus", "pending_jobs", "running_jobs")
    NAME_FIELD_NUMBER: _ClassVar[int]
    NODES_FIELD_NUMBER: _ClassVar[int]
    CLUSTER_TIME_FIELD_NUMBER: _ClassVar[int]
    TOTAL_GPUS_FIELD_NUMBER: _ClassVar[int]
    FREE_GPUS_FIELD_NUMBER: _ClassVar[int]
    PENDING_JOBS_FIELD_NUMBER: _ClassVar[int]
    RUNNING_JOBS_FIELD_NUMBER: _ClassVar[int]
    name: str
    nodes: _containers.RepeatedCompositeFieldContainer[NodeStatus]
    cluster_time: float
    total_gpus: int
    free_gpus: int
    pending_jobs: int
    running_jobs: int
    def __init__(self, name: _Optional[str] = ..., nodes: _Optional[_Iterable[_Union[NodeStatus, _Mapping]]] = ..., cluster_time: _Optional[float] = ..., total_gpus: _Optional[int] = ..., free_gpus: _Optional[int] = ..., pending_jobs: _Optional[int] = ..., running_jobs: _Optional[int] = ...) -> None: ...

class GetPolicyRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class PolicyStage(_message.Message):
    __slots__ = ("stage", "choice")
    STAGE_FIELD_NUMBER: _ClassVar[int]
    CHOICE_FIELD_NUMBER: _ClassVar[int]
    stage: str
    choice: str
    def __init__(self, stage: _Optional[str] = ..., choice: _Optional[str] = ...) -> None: ...

class PolicyInfo(_message.Message):
    __slots__ = ("name", "stages", "round_s")
    NAME_FIELD_NUMBER: _ClassVar[int]
    STAGES_FIELD_NUMBER: _ClassVar[int]
    ROUND_S_FIELD_NUMBER: _ClassVar[int]
    name: str
    stages: _containers.RepeatedCompositeFieldContainer[PolicyStage]
    round_s: float
    def __init__(self, name: _Optional[str] = ..., stages: _Optional[_Iterable[_Union[PolicyStage, _Mapping]]] = ..., round_s: _Optional[float] = ...) -> None: ...

class WhatIfRequest(_message.Message):
    __slots__ = ("policy", "drain", "undrain", "cancel", "add_node")
    POLICY_FIELD_NUMBER: _ClassVar[int]
    DRAIN_FIELD_NUMBER: _ClassVar[int]
    UNDRAIN_FIELD_NUMBER: _ClassVar[int]
    CANCEL_FIELD_NUMBER: _ClassVar[int]
    ADD_NODE_FIELD_NUMBER: _ClassVar[int]
    policy: str
    drain: _containers.RepeatedScalarFieldContainer[str]
    undrain: _containers.RepeatedScalarFieldContainer[str]
    cancel: _containers.RepeatedScalarFieldContainer[str]
    add_node: _containers.RepeatedCompositeFieldContainer[_types_pb2.NodeSpec]
    def __init__(self, policy: _Optional[str] = ..., drain: _Optional[_Iterable[str]] = ..., undrain: _Optional[_Iterable[str]] = ..., cancel: _Optional[_Iterable[str]] = ..., add_node: _Optional[_Iterable[_Union[_types_pb2.NodeSpec, _Mapping]]] = ...) -> None: ...

class ForecastSummary(_message.Message):
    __slots__ = ("policy", "jobs", "unfinished", "avg_wait_s", "p99_wait_s", "avg_jct_s", "p99_jct_s")
    POLICY_FIELD_NUMBER: _ClassVar[int]
    JOBS_FIELD_NUMBER: _ClassVar[int]
    UNFINISHED_FIELD_NUMBER: _ClassVar[int]
    AVG_WAIT_S_FIELD_NUMBER: _ClassVar[int]
    P99_WAIT_S_FIELD_NUMBER: _ClassVar[int]
    AVG_JCT_S_FIELD_NUMBER: _ClassVar[int]
    P99_JCT_S_FIELD_NUMBER: _ClassVar[int]
    policy: str
    jobs: int
    unfinished: int
    avg_wait_s: float
    p99_wait_s: float
    avg_jct_s: float
    p99_jct_s: float
    def __init__(self, policy: _Optional[str] = ..., jobs: _Optional[int] = ..., unfinished: _Optional[int] = ..., avg_wait_s: _Optional[float] = ..., p99_wait_s: _Optional[float] = ..., avg_jct_s: _Optional[float] = ..., p99_jct_s: _Optional[float] = ...) -> None: ...

class JobMove(_message.Message):
    __slots__ = ("job_id", "start_today", "start_changed", "finish_today", "finish_changed")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    START_TODAY_FIELD_NUMBER: _ClassVar[int]
    START_CHANGED_FIELD_NUMBER: _ClassVar[int]
    FINISH_TODAY_FIELD_NUMBER: _ClassVar[int]
    FINISH_CHANGED_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    start_today: float
    start_changed: float
    finish_today: float
    finish_changed: float
    def __init__(self, job_id: _Optional[str] = ..., start_today: _Optional[float] = ..., start_changed: _Optional[float] = ..., finish_today: _Optional[float] = ..., finish_changed: _Optional[float] = ...) -> None: ...

class WhatIfResponse(_message.Message):
    __slots__ = ("change", "made_at", "today", "changed", "moves")
    CHANGE_FIELD_NUMBER: _ClassVar[int]
    MADE_AT_FIELD_NUMBER: _ClassVar[int]
    TODAY_FIELD_NUMBER: _ClassVar[int]
    CHANGED_FIELD_NUMBER: _ClassVar[int]
    MOVES_FIELD_NUMBER: _ClassVar[int]
    change: str
    made_at: float
    today: ForecastSummary
    changed: ForecastSummary
    moves: _containers.RepeatedCompositeFieldContainer[JobMove]
    def __init__(self, change: _Optional[str] = ..., made_at: _Optional[float] = ..., today: _Optional[_Union[ForecastSummary, _Mapping]] = ..., changed: _Optional[_Union[ForecastSummary, _Mapping]] = ..., moves: _Optional[_Iterable[_Union[JobMove, _Mapping]]] = ...) -> None: ...
