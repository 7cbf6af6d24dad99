from halyard.v1 import types_pb2 as _types_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ExitStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    EXIT_STATUS_UNSPECIFIED: _ClassVar[ExitStatus]
    EXIT_COMPLETED: _ClassVar[ExitStatus]
    EXIT_FAILED: _ClassVar[ExitStatus]
    EXIT_PREEMPTED: _ClassVar[ExitStatus]
    EXIT_LOST: _ClassVar[ExitStatus]

class ClockKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    CLOCK_KIND_UNSPECIFIED: _ClassVar[ClockKind]
    REAL: _ClassVar[ClockKind]
    ACCELERATED: _ClassVar[ClockKind]
    MANUAL: _ClassVar[ClockKind]
EXIT_STATUS_UNSPECIFIED: ExitStatus
EXIT_COMPLETED: ExitStatus
EXIT_FAILED: ExitStatus
EXIT_PREEMPTED: ExitStatus
EXIT_LOST: ExitStatus
CLOCK_KIND_UNSPECIFIED: ClockKind
REAL: ClockKind
ACCELERATED: ClockKind
MANUAL: ClockKind

class AgentMessage(_message.Message):
    __slots__ = ("register", "heartbeat", "progress", "exited", "profile_result", "log_data", "leaving")
    REGISTER_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_FIELD_NUMBER: _ClassVar[int]
    PROGRESS_FIELD_NUMBER: _ClassVar[int]
    EXITED_FIELD_NUMBER: _ClassVar[int]
    PROFILE_RESULT_FIELD_NUMBER: _ClassVar[int]
    LOG_DATA_FIELD_NUMBER: _ClassVar[int]
    LEAVING_FIELD_NUMBER: _ClassVar[int]
    register: Register
    heartbeat: Heartbeat
    progress: Progress
    exited: Exited
    profile_result: ProfileResult
    log_data: LogData
    leaving: Leaving
    def __init__(self, register: _Optional[_Union[Register, _Mapping]] = ..., heartbeat: _Optional[_Union[Heartbeat, _Mapping]] = ..., progress: _Optional[_Union[Progress, _Mapping]] = ..., exited: _Optional[_Union[Exited, _Mapping]] = ..., profile_result: _Optional[_Union[ProfileResult, _Mapping]] = ..., log_data: _Optional[_Union[LogData, _Mapping]] = ..., leaving: _Optional[_Union[Leaving, _Mapping]] = ...) -> None: ...

class Leaving(_message.Message):
    __slots__ = ("reason",)
    REASON_FIELD_NUMBER: _ClassVar[int]
    reason: str
    def __init__(self, reason: _Optional[str] = ...) -> None: ...

class RunningJob(_message.Message):
    __slots__ = ("job_id", "attempt", "iterations_done", "leader")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    ITERATIONS_DONE_FIELD_NUMBER: _ClassVar[int]
    LEADER_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    attempt: int
    iterations_done: float
    leader: bool
    def __init__(self, job_id: _Optional[str] = ..., attempt: _Optional[int] = ..., iterations_done: _Optional[float] = ..., leader: _Optional[bool] = ...) -> None: ...

class Register(_message.Message):
    __slots__ = ("node", "running", "backend", "version", "instance", "cluster_digest", "leaving")
    NODE_FIELD_NUMBER: _ClassVar[int]
    RUNNING_FIELD_NUMBER: _ClassVar[int]
    BACKEND_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    INSTANCE_FIELD_NUMBER: _ClassVar[int]
    CLUSTER_DIGEST_FIELD_NUMBER: _ClassVar[int]
    LEAVING_FIELD_NUMBER: _ClassVar[int]
    node: _types_pb2.NodeSpec
    running: _containers.RepeatedCompositeFieldContainer[RunningJob]
    backend: str
    version: str
    instance: str
    cluster_digest: str
    leaving: bool
    def __init__(self, node: _Optional[_Union[_types_pb2.NodeSpec, _Mapping]] = ..., running: _Optional[_Iterable[_Union[RunningJob, _Mapping]]] = ..., backend: _Optional[str] = ..., version: _Optional[str] = ..., instance: _Optional[str] = ..., cluster_digest: _Optional[str] = ..., leaving: _Optional[bool] = ...) -> None: ...

class Heartbeat(_message.Message):
    __slots__ = ("cluster_time", "gpu_utilization", "healthy", "detail")
    CLUSTER_TIME_FIELD_NUMBER: _ClassVar[int]
    GPU_UTILIZATION_FIELD_NUMBER: _ClassVar[int]
    HEALTHY_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    cluster_time: float
    gpu_utilization: float
    healthy: bool
    detail: str
    def __init__(self, cluster_time: _Optional[float] = ..., gpu_utilization: _Optional[float] = ..., healthy: _Optional[bool] = ..., detail: _Optional[str] = ...) -> None: ...

class Progress(_message.Message):
    __slots__ = ("job_id", "attempt", "iterations_done", "cluster_time", "recent_iteration_s", "compute_s", "communication_s", "time_shift_drift_s")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    ITERATIONS_DONE_FIELD_NUMBER: _ClassVar[int]
    CLUSTER_TIME_FIELD_NUMBER: _ClassVar[int]
    RECENT_ITERATION_S_FIELD_NUMBER: _ClassVar[int]
    COMPUTE_S_FIELD_NUMBER: _ClassVar[int]
    COMMUNICATION_S_FIELD_NUMBER: _ClassVar[int]
    TIME_SHIFT_DRIFT_S_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    attempt: int
    iterations_done: float
    cluster_time: float
    recent_iteration_s: _containers.RepeatedScalarFieldContainer[float]
    compute_s: float
    communication_s: float
    time_shift_drift_s: float
    def __init__(self, job_id: _Optional[str] = ..., attempt: _Optional[int] = ..., iterations_done: _Optional[float] = ..., cluster_time: _Optional[float] = ..., recent_iteration_s: _Optional[_Iterable[float]] = ..., compute_s: _Optional[float] = ..., communication_s: _Optional[float] = ..., time_shift_drift_s: _Optional[float] = ...) -> None: ...

class Exited(_message.Message):
    __slots__ = ("job_id", "attempt", "status", "cluster_time", "checkpoint_iteration", "message")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    CLUSTER_TIME_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_ITERATION_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    attempt: int
    status: ExitStatus
    cluster_time: float
    checkpoint_iteration: int
    message: str
    def __init__(self, job_id: _Optional[str] = ..., attempt: _Optional[int] = ..., status: _Optional[_Union[ExitStatus, int, str]] = ..., cluster_time: _Optional[float] = ..., checkpoint_iteration: _Optional[int] = ..., message: _Optional[str] = ...) -> None: ...

class ExitAck(_message.Message):
    __slots__ = ("job_id", "attempt")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    attempt: int
    def __init__(self, job_id: _Optional[str] = ..., attempt: _Optional[int] = ...) -> None: ...

class LogData(_message.Message):
    __slots__ = ("request_id", "offset", "data", "complete", "error")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    COMPLETE_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    request_id: int
    offset: int
    data: bytes
    complete: bool
    error: str
    def __init__(self, request_id: _Optional[int] = ..., offset: _Optional[int] = ..., data: _Optional[bytes] = ..., complete: _Optional[bool] = ..., error: _Optional[str] = ...) -> None: ...

class ProfilePoint(_message.Message):
    __slots__ = ("cpus", "memory_mb", "throughput")
    CPUS_FIELD_NUMBER: _ClassVar[int]
    MEMORY_MB_FIELD_NUMBER: _ClassVar[int]
    THROUGHPUT_FIELD_NUMBER: _ClassVar[int]
    cpus: int
    memory_mb: int
    throughput: float
    def __init__(self, cpus: _Optional[int] = ..., memory_mb: _Optional[int] = ..., throughput: _Optional[float] = ...) -> None: ...

class StageProfile(_message.Message):
    __slots__ = ("data", "tensor", "compute_s", "tensor_comm_s", "recv_s", "allreduce_s", "optimizer_s", "memory_bytes", "capacity_bytes", "expert_comm_s")
    DATA_FIELD_NUMBER: _ClassVar[int]
    TENSOR_FIELD_NUMBER: _ClassVar[int]
    COMPUTE_S_FIELD_NUMBER: _ClassVar[int]
    TENSOR_COMM_S_FIELD_NUMBER: _ClassVar[int]
    RECV_S_FIELD_NUMBER: _ClassVar[int]
    ALLREDUCE_S_FIELD_NUMBER: _ClassVar[int]
    OPTIMIZER_S_FIELD_NUMBER: _ClassVar[int]
    MEMORY_BYTES_FIELD_NUMBER: _ClassVar[int]
    CAPACITY_BYTES_FIELD_NUMBER: _ClassVar[int]
    EXPERT_COMM_S_FIELD_NUMBER: _ClassVar[int]
    data: int
    tensor: int
    compute_s: float
    tensor_comm_s: float
    recv_s: float
    allreduce_s: float
    optimizer_s: float
    memory_bytes: float
    capacity_bytes: float
    expert_comm_s: float
    def __init__(self, data: _Optional[int] = ..., tensor: _Optional[int] = ..., compute_s: _Optional[float] = ..., tensor_comm_s: _Optional[float] = ..., recv_s: _Optional[float] = ..., allreduce_s: _Optional[float] = ..., optimizer_s: _Optional[float] = ..., memory_bytes: _Optional[float] = ..., capacity_bytes: _Optional[float] = ..., expert_comm_s: _Optional[float] = ...) -> None: ...

class ProfileResult(_message.Message):
    __slots__ = ("job_id", "points", "request_id", "stages", "error")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    POINTS_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    STAGES_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    points: _containers.RepeatedCompositeFieldContainer[ProfilePoint]
    request_id: int
    stages: _containers.RepeatedCompositeFieldContainer[StageProfile]
    error: str
    def __init__(self, job_id: _Optional[str] = ..., points: _Optional[_Iterable[_Union[ProfilePoint, _Mapping]]] = ..., request_id: _Optional[int] = ..., stages: _Optional[_Iterable[_Union[StageProfile, _Mapping]]] = ..., error: _Optional[str] = ...) -> None: ...

class ControlMessage(_message.Message):
    __slots__ = ("registered", "launch", "preempt", "reconfigure", "set_time_shift", "profile", "drain", "exit_ack", "read_log", "leader_epoch")
    REGISTERED_FIELD_NUMBER: _ClassVar[int]
    LAUNCH_FIELD_NUMBER: _ClassVar[int]
    PREEMPT_FIELD_NUMBER: _ClassVar[int]
    RECONFIGURE_FIELD_NUMBER: _ClassVar[int]
    SET_TIME_SHIFT_FIELD_NUMBER: _ClassVar[int]
    PROFILE_FIELD_NUMBER: _ClassVar[int]
    DRAIN_FIELD_NUMBER: _ClassVar[int]
    EXIT_ACK_FIELD_NUMBER: _ClassVar[int]
    READ_LOG_FIELD_NUMBER: _ClassVar[int]
    LEADER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    registered: Registered
    launch: Launch
    preempt: Preempt
    reconfigure: Reconfigure
    set_time_shift: SetTimeShift
    profile: Profile
    drain: Drain
    exit_ack: ExitAck
    read_log: ReadLog
    leader_epoch: int
    def __init__(self, registered: _Optional[_Union[Registered, _Mapping]] = ..., launch: _Optional[_Union[Launch, _Mapping]] = ..., preempt: _Optional[_Union[Preempt, _Mapping]] = ..., reconfigure: _Optional[_Union[Reconfigure, _Mapping]] = ..., set_time_shift: _Optional[_Union[SetTimeShift, _Mapping]] = ..., profile: _Optional[_Union[Profile, _Mapping]] = ..., drain: _Optional[_Union[Drain, _Mapping]] = ..., exit_ack: _Optional[_Union[ExitAck, _Mapping]] = ..., read_log: _Optional[_Union[ReadLog, _Mapping]] = ..., leader_epoch: _Optional[int] = ...) -> None: ...

class ClockParams(_message.Message):
    __slots__ = ("kind", "wall_origin_unix_s", "cluster_origin_s", "speedup")
    KIND_FIELD_NUMBER: _ClassVar[int]
    WALL_ORIGIN_UNIX_S_FIELD_NUMBER: _ClassVar[int]
    CLUSTER_ORIGIN_S_FIELD_NUMBER: _ClassVar[int]
    SPEEDUP_FIELD_NUMBER: _ClassVar[int]
    kind: ClockKind
    wall_origin_unix_s: float
    cluster_origin_s: float
    speedup: float
    def __init__(self, kind: _Optional[_Union[ClockKind, int, str]] = ..., wall_origin_unix_s: _Optional[float] = ..., cluster_origin_s: _Optional[float] = ..., speedup: _Optional[float] = ...) -> None: ...

class Registered(_message.Message):
    __slots__ = ("node", "clock", "cluster_toml", "heartbeat_interval_s", "data_stalls", "catalog_toml", "node_spec", "cluster_digest", "leader_epoch")
    NODE_FIELD_NUMBER: _ClassVar[int]
    CLOCK_FIELD_NUMBER: _ClassVar[int]
    CLUSTER_TOML_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_INTERVAL_S_FIELD_NUMBER: _ClassVar[int]
    DATA_STALLS_FIELD_NUMBER: _ClassVar[int]
    CATALOG_TOML_FIELD_NUMBER: _ClassVar[int]
    NODE_SPEC_FIELD_NUMBER: _ClassVar[int]
    CLUSTER_DIGEST_FIELD_NUMBER: _ClassVar[int]
    LEADER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    node: str
    clock: ClockParams
    cluster_toml: str
    heartbeat_interval_s: float
    data_stalls: bool
    catalog_toml: str
    node_spec: _types_pb2.NodeSpec
    cluster_digest: str
    leader_epoch: int
    def __init__(self, node: _Optional[str] = ..., clock: _Optional[_Union[ClockParams, _Mapping]] = ..., cluster_toml: _Optional[str] = ..., heartbeat_interval_s: _Optional[float] = ..., data_stalls: _Optional[bool] = ..., catalog_toml: _Optional[str] = ..., node_spec: _Optional[_Union[_types_pb2.NodeSpec, _Mapping]] = ..., cluster_digest: _Optional[str] = ..., leader_epoch: _Optional[int] = ...) -> None: ...

class Launch(_message.Message):
    __slots__ = ("job_id", "attempt", "spec", "allocation", "leader", "iterations_total", "iterations_done", "restore_s", "start_time", "link_slowdown")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    SPEC_FIELD_NUMBER: _ClassVar[int]
    ALLOCATION_FIELD_NUMBER: _ClassVar[int]
    LEADER_FIELD_NUMBER: _ClassVar[int]
    ITERATIONS_TOTAL_FIELD_NUMBER: _ClassVar[int]
    ITERATIONS_DONE_FIELD_NUMBER: _ClassVar[int]
    RESTORE_S_FIELD_NUMBER: _ClassVar[int]
    START_TIME_FIELD_NUMBER: _ClassVar[int]
    LINK_SLOWDOWN_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    attempt: int
    spec: _types_pb2.JobSpec
    allocation: _types_pb2.Allocation
    leader: bool
    iterations_total: int
    iterations_done: float
    restore_s: float
    start_time: float
    link_slowdown: float
    def __init__(self, job_id: _Optional[str] = ..., attempt: _Optional[int] = ..., spec: _Optional[_Union[_types_pb2.JobSpec, _Mapping]] = ..., allocation: _Optional[_Union[_types_pb2.Allocation, _Mapping]] = ..., leader: _Optional[bool] = ..., iterations_total: _Optional[int] = ..., iterations_done: _Optional[float] = ..., restore_s: _Optional[float] = ..., start_time: _Optional[float] = ..., link_slowdown: _Optional[float] = ...) -> None: ...

class Preempt(_message.Message):
    __slots__ = ("job_id", "attempt", "grace_s")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    GRACE_S_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    attempt: int
    grace_s: float
    def __init__(self, job_id: _Optional[str] = ..., attempt: _Optional[int] = ..., grace_s: _Optional[float] = ...) -> None: ...

class Reconfigure(_message.Message):
    __slots__ = ("job_id", "attempt", "allocation", "leader", "restore_s", "iterations_done", "start_time", "link_slowdown", "restart_attempt", "iterations_total", "grace_s")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    ALLOCATION_FIELD_NUMBER: _ClassVar[int]
    LEADER_FIELD_NUMBER: _ClassVar[int]
    RESTORE_S_FIELD_NUMBER: _ClassVar[int]
    ITERATIONS_DONE_FIELD_NUMBER: _ClassVar[int]
    START_TIME_FIELD_NUMBER: _ClassVar[int]
    LINK_SLOWDOWN_FIELD_NUMBER: _ClassVar[int]
    RESTART_ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    ITERATIONS_TOTAL_FIELD_NUMBER: _ClassVar[int]
    GRACE_S_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    attempt: int
    allocation: _types_pb2.Allocation
    leader: bool
    restore_s: float
    iterations_done: float
    start_time: float
    link_slowdown: float
    restart_attempt: int
    iterations_total: int
    grace_s: float
    def __init__(self, job_id: _Optional[str] = ..., attempt: _Optional[int] = ..., allocation: _Optional[_Union[_types_pb2.Allocation, _Mapping]] = ..., leader: _Optional[bool] = ..., restore_s: _Optional[float] = ..., iterations_done: _Optional[float] = ..., start_time: _Optional[float] = ..., link_slowdown: _Optional[float] = ..., restart_attempt: _Optional[int] = ..., iterations_total: _Optional[int] = ..., grace_s: _Optional[float] = ...) -> None: ...

class SetTimeShift(_message.Message):
    __slots__ = ("job_id", "attempt", "seconds", "period_s", "epoch_s")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    SECONDS_FIELD_NUMBER: _ClassVar[int]
    PERIOD_S_FIELD_NUMBER: _ClassVar[int]
    EPOCH_S_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    attempt: int
    seconds: float
    period_s: float
    epoch_s: float
    def __init__(self, job_id: _Optional[str] = ..., attempt: _Optional[int] = ..., seconds: _Optional[float] = ..., period_s: _Optional[float] = ..., epoch_s: _Optional[float] = ...) -> None: ...

class Profile(_message.Message):
    __slots__ = ("job_id", "spec", "points", "request_id", "allocation")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    SPEC_FIELD_NUMBER: _ClassVar[int]
    POINTS_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    ALLOCATION_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    spec: _types_pb2.JobSpec
    points: _containers.RepeatedCompositeFieldContainer[ProfilePoint]
    request_id: int
    allocation: _types_pb2.Allocation
    def __init__(self, job_id: _Optional[str] = ..., spec: _Optional[_Union[_types_pb2.JobSpec, _Mapping]] = ..., points: _Optional[_Iterable[_Union[ProfilePoint, _Mapping]]] = ..., request_id: _Optional[int] = ..., allocation: _Optional[_Union[_types_pb2.Allocation, _Mapping]] = ...) -> None: ...

class ReadLog(_message.Message):
    __slots__ = ("request_id", "job_id", "attempt", "offset", "max_bytes")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    MAX_BYTES_FIELD_NUMBER: _ClassVar[int]
    request_id: int
    job_id: str
    attempt: int
    offset: int
    max_bytes: int
    def __init__(self, request_id: _Optional[int] = ..., job_id: _Optional[str] = ..., attempt: _Optional[int] = ..., offset: _Optional[int] = ..., max_bytes: _Optional[int] = ...) -> None: ...

class Drain(_message.Message):
    __slots__ = ("reason",)
    REASON_FIELD_NUMBER: _ClassVar[int]
    reason: str
    def __init__(self, reason: _Optional[str] = ...) -> None: ...
