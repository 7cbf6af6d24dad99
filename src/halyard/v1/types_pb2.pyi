from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class JobState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    JOB_STATE_UNSPECIFIED: _ClassVar[JobState]
    PENDING: _ClassVar[JobState]
    RUNNING: _ClassVar[JobState]
    PREEMPTED: _ClassVar[JobState]
    COMPLETED: _ClassVar[JobState]
    FAILED: _ClassVar[JobState]
    CANCELLED: _ClassVar[JobState]

class EventKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    EVENT_KIND_UNSPECIFIED: _ClassVar[EventKind]
    EVENT_SUBMITTED: _ClassVar[EventKind]
    EVENT_STARTED: _ClassVar[EventKind]
    EVENT_PREEMPTED: _ClassVar[EventKind]
    EVENT_REQUEUED: _ClassVar[EventKind]
    EVENT_MIGRATED: _ClassVar[EventKind]
    EVENT_RESIZED: _ClassVar[EventKind]
    EVENT_TIME_SHIFT: _ClassVar[EventKind]
    EVENT_RESOURCES: _ClassVar[EventKind]
    EVENT_COMPLETED: _ClassVar[EventKind]
    EVENT_FAILED: _ClassVar[EventKind]
    EVENT_CANCELLED: _ClassVar[EventKind]
    EVENT_SUSPENDED: _ClassVar[EventKind]
JOB_STATE_UNSPECIFIED: JobState
PENDING: JobState
RUNNING: JobState
PREEMPTED: JobState
COMPLETED: JobState
FAILED: JobState
CANCELLED: JobState
EVENT_KIND_UNSPECIFIED: EventKind
EVENT_SUBMITTED: EventKind
EVENT_STARTED: EventKind
EVENT_PREEMPTED: EventKind
EVENT_REQUEUED: EventKind
EVENT_MIGRATED: EventKind
EVENT_RESIZED: EventKind
EVENT_TIME_SHIFT: EventKind
EVENT_RESOURCES: EventKind
EVENT_COMPLETED: EventKind
EVENT_FAILED: EventKind
EVENT_CANCELLED: EventKind
EVENT_SUSPENDED: EventKind

class Parallelism(_message.Message):
    __slots__ = ("data", "tensor", "pipeline")
    DATA_FIELD_NUMBER: _ClassVar[int]
    TENSOR_FIELD_NUMBER: _ClassVar[int]
    PIPELINE_FIELD_NUMBER: _ClassVar[int]
    data: int
    tensor: int
    pipeline: int
    def __init__(self, data: _Optional[int] = ..., tensor: _Optional[int] = ..., pipeline: _Optional[int] = ...) -> None: ...

class JobSpec(_message.Message):
    __slots__ = ("job_id", "tenant", "user", "model", "num_gpus", "iterations", "duration_s", "batch_size", "gpu_type", "min_gpus", "max_gpus", "parallelism", "priority", "deadline", "command", "env", "logical_workers")
    class EnvEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    USER_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    NUM_GPUS_FIELD_NUMBER: _ClassVar[int]
    ITERATIONS_FIELD_NUMBER: _ClassVar[int]
    DURATION_S_FIELD_NUMBER: _ClassVar[int]
    BATCH_SIZE_FIELD_NUMBER: _ClassVar[int]
    GPU_TYPE_FIELD_NUMBER: _ClassVar[int]
    MIN_GPUS_FIELD_NUMBER: _ClassVar[int]
    MAX_GPUS_FIELD_NUMBER: _ClassVar[int]
    PARALLELISM_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    DEADLINE_FIELD_NUMBER: _ClassVar[int]
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    ENV_FIELD_NUMBER: _ClassVar[int]
    LOGICAL_WORKERS_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    tenant: str
    user: str
    model: str
    num_gpus: int
    iterations: int
    duration_s: float
    batch_size: int
    gpu_type: str
    min_gpus: int
    max_gpus: int
    parallelism: Parallelism
    priority: int
    deadline: float
    command: _containers.RepeatedScalarFieldContainer[str]
    env: _containers.ScalarMap[str, str]
    logical_workers: int
    def __init__(self, job_id: _Optional[str] = ..., tenant: _Optional[str] = ..., user: _Optional[str] = ..., model: _Optional[str] = ..., num_gpus: _Optional[int] = ..., iterations: _Optional[int] = ..., duration_s: _Optional[float] = ..., batch_size: _Optional[int] = ..., gpu_type: _Optional[str] = ..., min_gpus: _Optional[int] = ..., max_gpus: _Optional[int] = ..., parallelism: _Optional[_Union[Parallelism, _Mapping]] = ..., priority: _Optional[int] = ..., deadline: _Optional[float] = ..., command: _Optional[_Iterable[str]] = ..., env: _Optional[_Mapping[str, str]] = ..., logical_workers: _Optional[int] = ...) -> None: ...

class NodeAllocation(_message.Message):
    __slots__ = ("node", "gpus", "cpus", "memory_mb", "workers")
    NODE_FIELD_NUMBER: _ClassVar[int]
    GPUS_FIELD_NUMBER: _ClassVar[int]
    CPUS_FIELD_NUMBER: _ClassVar[int]
    MEMORY_MB_FIELD_NUMBER: _ClassVar[int]
    WORKERS_FIELD_NUMBER: _ClassVar[int]
    node: str
    gpus: _containers.RepeatedScalarFieldContainer[int]
    cpus: int
    memory_mb: int
    workers: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, node: _Optional[str] = ..., gpus: _Optional[_Iterable[int]] = ..., cpus: _Optional[int] = ..., memory_mb: _Optional[int] = ..., workers: _Optional[_Iterable[int]] = ...) -> None: ...

class StagePlan(_message.Message):
    __slots__ = ("gpus", "data", "tensor")
    GPUS_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    TENSOR_FIELD_NUMBER: _ClassVar[int]
    gpus: int
    data: int
    tensor: int
    def __init__(self, gpus: _Optional[int] = ..., data: _Optional[int] = ..., tensor: _Optional[int] = ...) -> None: ...

class TimeShift(_message.Message):
    __slots__ = ("seconds", "period_s", "epoch_s")
    SECONDS_FIELD_NUMBER: _ClassVar[int]
    PERIOD_S_FIELD_NUMBER: _ClassVar[int]
    EPOCH_S_FIELD_NUMBER: _ClassVar[int]
    seconds: float
    period_s: float
    epoch_s: float
    def __init__(self, seconds: _Optional[float] = ..., period_s: _Optional[float] = ..., epoch_s: _Optional[float] = ...) -> None: ...

class Allocation(_message.Message):
    __slots__ = ("nodes", "time_shift_s", "stages", "time_shift")
    NODES_FIELD_NUMBER: _ClassVar[int]
    TIME_SHIFT_S_FIELD_NUMBER: _ClassVar[int]
    STAGES_FIELD_NUMBER: _ClassVar[int]
    TIME_SHIFT_FIELD_NUMBER: _ClassVar[int]
    nodes: _containers.RepeatedCompositeFieldContainer[NodeAllocation]
    time_shift_s: float
    stages: _containers.RepeatedCompositeFieldContainer[StagePlan]
    time_shift: TimeShift
    def __init__(self, nodes: _Optional[_Iterable[_Union[NodeAllocation, _Mapping]]] = ..., time_shift_s: _Optional[float] = ..., stages: _Optional[_Iterable[_Union[StagePlan, _Mapping]]] = ..., time_shift: _Optional[_Union[TimeShift, _Mapping]] = ...) -> None: ...

class NodeSpec(_message.Message):
    __slots__ = ("name", "rack", "gpu_type", "gpus", "cpus", "memory_mb", "fabric", "fabric_gbyte_s", "nic_gbyte_s")
    NAME_FIELD_NUMBER: _ClassVar[int]
    RACK_FIELD_NUMBER: _ClassVar[int]
    GPU_TYPE_FIELD_NUMBER: _ClassVar[int]
    GPUS_FIELD_NUMBER: _ClassVar[int]
    CPUS_FIELD_NUMBER: _ClassVar[int]
    MEMORY_MB_FIELD_NUMBER: _ClassVar[int]
    FABRIC_FIELD_NUMBER: _ClassVar[int]
    FABRIC_GBYTE_S_FIELD_NUMBER: _ClassVar[int]
    NIC_GBYTE_S_FIELD_NUMBER: _ClassVar[int]
    name: str
    rack: str
    gpu_type: str
    gpus: int
    cpus: int
    memory_mb: int
    fabric: str
    fabric_gbyte_s: float
    nic_gbyte_s: float
    def __init__(self, name: _Optional[str] = ..., rack: _Optional[str] = ..., gpu_type: _Optional[str] = ..., gpus: _Optional[int] = ..., cpus: _Optional[int] = ..., memory_mb: _Optional[int] = ..., fabric: _Optional[str] = ..., fabric_gbyte_s: _Optional[float] = ..., nic_gbyte_s: _Optional[float] = ...) -> None: ...

class JobEvent(_message.Message):
    __slots__ = ("seq", "time", "job_id", "kind", "state", "detail", "event_kind")
    SEQ_FIELD_NUMBER: _ClassVar[int]
    TIME_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    EVENT_KIND_FIELD_NUMBER: _ClassVar[int]
    seq: int
    time: float
    job_id: str
    kind: str
    state: JobState
    detail: str
    event_kind: EventKind
    def __init__(self, seq: _Optional[int] = ..., time: _Optional[float] = ..., job_id: _Optional[str] = ..., kind: _Optional[str] = ..., state: _Optional[_Union[JobState, int, str]] = ..., detail: _Optional[str] = ..., event_kind: _Optional[_Union[EventKind, int, str]] = ...) -> None: ...
