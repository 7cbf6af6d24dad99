from halyard.v1 import types_pb2 as _types_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class WaitCode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    WAIT_CODE_UNSPECIFIED: _ClassVar[WaitCode]
    CANNOT_FIT_NOW: _ClassVar[WaitCode]
    NEVER_FITS: _ClassVar[WaitCode]
    WAITING_BY_POLICY: _ClassVar[WaitCode]
WAIT_CODE_UNSPECIFIED: WaitCode
CANNOT_FIT_NOW: WaitCode
NEVER_FITS: WaitCode
WAITING_BY_POLICY: WaitCode

class Job(_message.Message):
    __slots__ = ("spec", "state", "allocation", "iterations_done", "iterations_total", "submit_time", "start_time", "end_time", "preemptions", "queued_s", "wait", "ignored", "time_shift_drift_s", "suspensions", "env_names", "end_reason", "forecast")
    SPEC_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    ALLOCATION_FIELD_NUMBER: _ClassVar[int]
    ITERATIONS_DONE_FIELD_NUMBER: _ClassVar[int]
    ITERATIONS_TOTAL_FIELD_NUMBER: _ClassVar[int]
    SUBMIT_TIME_FIELD_NUMBER: _ClassVar[int]
    START_TIME_FIELD_NUMBER: _ClassVar[int]
    END_TIME_FIELD_NUMBER: _ClassVar[int]
    PREEMPTIONS_FIELD_NUMBER: _ClassVar[int]
    QUEUED_S_FIELD_NUMBER: _ClassVar[int]
    WAIT_FIELD_NUMBER: _ClassVar[int]
    IGNORED_FIELD_NUMBER: _ClassVar[int]
    TIME_SHIFT_DRIFT_S_FIELD_NUMBER: _ClassVar[int]
    SUSPENSIONS_FIELD_NUMBER: _ClassVar[int]
    ENV_NAMES_FIELD_NUMBER: _ClassVar[int]
    END_REASON_FIELD_NUMBER: _ClassVar[int]
    FORECAST_FIELD_NUMBER: _ClassVar[int]
    spec: _types_pb2.JobSpec
    state: _types_pb2.JobState
    allocation: _types_pb2.Allocation
    iterations_done: float
    iterations_total: int
    submit_time: float
    start_time: float
    end_time: float
    preemptions: int
    queued_s: float
    wait: WaitReason
    ignored: str
    time_shift_drift_s: float
    suspensions: int
    env_names: _containers.RepeatedScalarFieldContainer[str]
    end_reason: str
    forecast: JobForecast
    def __init__(self, spec: _Optional[_Union[_types_pb2.JobSpec, _Mapping]] = ..., state: _Optional[_Union[_types_pb2.JobState, int, str]] = ..., allocation: _Optional[_Union[_types_pb2.Allocation, _Mapping]] = ..., iterations_done: _Optional[float] = ..., iterations_total: _Optional[int] = ..., submit_time: _Optional[float] = ..., start_time: _Optional[float] = ..., end_time: _Optional[float] = ..., preemptions: _Optional[int] = ..., queued_s: _Optional[float] = ..., wait: _Optional[_Union[WaitReason, _Mapping]] = ..., ignored: _Optional[str] = ..., time_shift_drift_s: _Optional[float] = ..., suspensions: _Optional[int] = ..., env_names: _Optional[_Iterable[str]] = ..., end_reason: _Optional[str] = ..., forecast: _Optional[_Union[JobForecast, _Mapping]] = ...) -> None: ...

class JobForecast(_message.Message):
    __slots__ = ("expected_start", "expected_finish", "made_at", "start_p10", "start_p90", "finish_p10", "finish_p90", "expected_start_unix", "expected_finish_unix", "made_at_unix", "assumes", "start_p50", "finish_p50")
    EXPECTED_START_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_FINISH_FIELD_NUMBER: _ClassVar[int]
    MADE_AT_FIELD_NUMBER: _ClassVar[int]
    START_P10_FIELD_NUMBER: _ClassVar[int]
    START_P90_FIELD_NUMBER: _ClassVar[int]
    FINISH_P10_FIELD_NUMBER: _ClassVar[int]
    FINISH_P90_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_START_UNIX_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_FINISH_UNIX_FIELD_NUMBER: _ClassVar[int]
    MADE_AT_UNIX_FIELD_NUMBER: _ClassVar[int]
    ASSUMES_FIELD_NUMBER: _ClassVar[int]
    START_P50_FIELD_NUMBER: _ClassVar[int]
    FINISH_P50_FIELD_NUMBER: _ClassVar[int]
    expected_start: float
    expected_finish: float
    made_at: float
    start_p10: float
    start_p90: float
    finish_p10: float
    finish_p90: float
    expected_start_unix: float
    expected_finish_unix: float
    made_at_unix: float
    assumes: str
    start_p50: float
    finish_p50: float
    def __init__(self, expected_start: _Optional[float] = ..., expected_finish: _Optional[float] = ..., made_at: _Optional[float] = ..., start_p10: _Optional[float] = ..., start_p90: _Optional[float] = ..., finish_p10: _Optional[float] = ..., finish_p90: _Optional[float] = ..., expected_start_unix: _Optional[float] = ..., expected_finish_unix: _Optional[float] = ..., made_at_unix: _Optional[float] = ..., assumes: _Optional[str] = ..., start_p50: _Optional[float] = ..., finish_p50: _Optional[float] = ...) -> None: ...

class WaitReason(_message.Message):
    __slots__ = ("code", "stage", "reason")
    CODE_FIELD_NUMBER: _ClassVar[int]
    STAGE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    code: WaitCode
    stage: str
    reason: str
    def __init__(self, code: _Optional[_Union[WaitCode, int, str]] = ..., stage: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class SubmitJobRequest(_message.Message):
    __slots__ = ("spec", "submit_time")
    SPEC_FIELD_NUMBER: _ClassVar[int]
    SUBMIT_TIME_FIELD_NUMBER: _ClassVar[int]
    spec: _types_pb2.JobSpec
    submit_time: float
    def __init__(self, spec: _Optional[_Union[_types_pb2.JobSpec, _Mapping]] = ..., submit_time: _Optional[float] = ...) -> None: ...

class SubmitJobsRequest(_message.Message):
    __slots__ = ("jobs",)
    JOBS_FIELD_NUMBER: _ClassVar[int]
    jobs: _containers.RepeatedCompositeFieldContainer[SubmitJobRequest]
    def __init__(self, jobs: _Optional[_Iterable[_Union[SubmitJobRequest, _Mapping]]] = ...) -> None: ...

class SubmitJobsResponse(_message.Message):
    __slots__ = ("results",)
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[SubmitJobResult]
    def __init__(self, results: _Optional[_Iterable[_Union[SubmitJobResult, _Mapping]]] = ...) -> None: ...

class SubmitJobResult(_message.Message):
    __slots__ = ("job", "error")
    JOB_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    job: Job
    error: SubmitError
    def __init__(self, job: _Optional[_Union[Job, _Mapping]] = ..., error: _Optional[_Union[SubmitError, _Mapping]] = ...) -> None: ...

class SubmitError(_message.Message):
    __slots__ = ("code", "message")
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    code: int
    message: str
    def __init__(self, code: _Optional[int] = ..., message: _Optional[str] = ...) -> None: ...

class GetJobRequest(_message.Message):
    __slots__ = ("job_id",)
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    def __init__(self, job_id: _Optional[str] = ...) -> None: ...

class ListJobsRequest(_message.Message):
    __slots__ = ("page_size", "page_token", "states", "tenant")
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    STATES_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    page_size: int
    page_token: str
    states: _containers.RepeatedScalarFieldContainer[_types_pb2.JobState]
    tenant: str
    def __init__(self, page_size: _Optional[int] = ..., page_token: _Optional[str] = ..., states: _Optional[_Iterable[_Union[_types_pb2.JobState, int, str]]] = ..., tenant: _Optional[str] = ...) -> None: ...

class ListJobsResponse(_message.Message):
    __slots__ = ("jobs", "next_page_token")
    JOBS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    jobs: _containers.RepeatedCompositeFieldContainer[Job]
    next_page_token: str
    def __init__(self, jobs: _Optional[_Iterable[_Union[Job, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class CancelJobRequest(_message.Message):
    __slots__ = ("job_id",)
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    def __init__(self, job_id: _Optional[str] = ...) -> None: ...

class StreamLogsRequest(_message.Message):
    __slots__ = ("job_id", "attempt", "follow", "offset", "node")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    FOLLOW_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    NODE_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    attempt: int
    follow: bool
    offset: int
    node: str
    def __init__(self, job_id: _Optional[str] = ..., attempt: _Optional[int] = ..., follow: _Optional[bool] = ..., offset: _Optional[int] = ..., node: _Optional[str] = ...) -> None: ...

class LogChunk(_message.Message):
    __slots__ = ("node", "attempt", "offset", "data")
    NODE_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    node: str
    attempt: int
    offset: int
    data: bytes
    def __init__(self, node: _Optional[str] = ..., attempt: _Optional[int] = ..., offset: _Optional[int] = ..., data: _Optional[bytes] = ...) -> None: ...

class WatchEventsRequest(_message.Message):
    __slots__ = ("after_seq", "job_id")
    AFTER_SEQ_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    after_seq: int
    job_id: str
    def __init__(self, after_seq: _Optional[int] = ..., job_id: _Optional[str] = ...) -> None: ...
