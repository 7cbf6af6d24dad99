"""The documented range of every field a client submits (docs/security.md, "Input limits").

A job passes these checks before anything about it is stored or sent to an agent,
so no value that reaches the store can overflow a column, no name that becomes a
path can leave the agent's work directory, and every Launch a job makes stays far
below the 4 MiB an agent accepts in one message.

Numeric ranges hold for every :class:`~halyard.datamodel.JobSpec` (trace readers
too); the character sets and sizes of names, ``command`` and ``env`` are checked
where a job arrives over gRPC (:func:`halyard.wire.spec_from_pb`), since a trace
file may use any id the simulator can print.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from halyard.datamodel.errors import ValidationError

# --- numbers ----------------------------------------------------------------------
MAX_GPUS = 65_536  # num_gpus, min_gpus, max_gpus and each parallelism degree
MAX_LOGICAL_WORKERS = 1 << 20  # logical_workers (EasyScale maxP): a bound far above any job, below a Launch
MAX_ITERATIONS = 10**12  # iterations (and the iterations a duration_s converts to): exact as a double
MAX_DURATION_S = 10**9  # duration_s: about 31 years of cluster time
MAX_BATCH_SIZE = 1 << 20  # batch_size per GPU
MAX_PRIORITY = 10**6  # |priority|
MAX_DEADLINE_S = 10**10  # deadline, seconds after submission (about 317 years)
MAX_TIME_S = 10**12  # submit_time and every other cluster time a client names

# --- names that become paths, metric labels or log fields ---------------------------
# A letter or digit first, then letters, digits and . _ - : @ + = ; no '/', no '..'
# as a whole, no whitespace or control character. Job ids name the agent's checkpoint
# directory (WORK_DIR/checkpoints/JOB_ID) and log file.
NAME_PATTERN = r"[A-Za-z0-9][A-Za-z0-9._:@+=-]*"
MAX_JOB_ID = 128
MAX_TENANT = 64
MAX_USER = 64
MAX_MODEL = 128
MAX_GPU_TYPE = 64

# --- what a process runs -------------------------------------------------------------
MAX_COMMAND_ARGS = 256
MAX_COMMAND_BYTES = 64 * 1024  # all arguments together (UTF-8)
MAX_ENV_VARS = 256
MAX_ENV_BYTES = 64 * 1024  # all names and values together (UTF-8)
ENV_NAME_PATTERN = r"[A-Za-z_][A-Za-z0-9_]*"
MAX_ENV_NAME = 256

# --- other request fields ---------------------------------------------------------------
MAX_DRAIN_REASON = 512  # DrainNode's reason, kept with the node
MAX_REQUEST_ID = MAX_JOB_ID  # job ids and node names in Get/Cancel/Watch/Drain requests
MAX_PAGE_TOKEN = 20
MAX_REQUEST_BYTES = 1 << 20  # the control plane refuses larger messages (RESOURCE_EXHAUSTED)
MAX_SUBMIT_BATCH = 1000  # jobs in one SubmitJobs call (a choice of ours: one commit holds them all)

# --- what agents report (choices of ours: far above what an agent sends, far below a message) ----
MAX_RECENT_ITERATIONS = 1000  # Progress.recent_iteration_s entries (agents send the last few)
MAX_EXIT_MESSAGE_BYTES = 64 * 1024  # Exited.message: a process's last words, kept in the job's FAILED event
MAX_AGENT_INSTANCE = 64  # Register.instance kept for a session (agents send a 32-hex-digit uuid)
MAX_AGENT_BACKEND = 32  # Register.backend: a name (emulated, process, gpu)
MAX_AGENT_VERSION = 64  # Register.version (halyard-process/1)
MAX_CLUSTER_DIGEST = 64  # Register.cluster_digest: SHA-256 in hex
MAX_REPORTED_JOBS = 65_536  # Register.running entries (one per job part a node runs, and exits not yet acked)
MAX_HEALTH_DETAIL = 400  # Heartbeat.detail kept (cut, cleaned): under MAX_DRAIN_REASON with "unhealthy: " before it
MAX_AGENT_TEXT = 1024  # other free text an agent sends (Leaving.reason, ProfileResult.error, LogData.error), cut

_NAME = re.compile(NAME_PATTERN)
_ENV_NAME = re.compile(ENV_NAME_PATTERN)
# Terminal escape sequences (CSI ``ESC [ ... final`` and OSC ``ESC ] ... BEL|ESC \``) and any other control
# character: what clean_text removes, so a peer's text cannot drive an operator's terminal or a log viewer.
_ESCAPES = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|\x1b.?")
_SPACES = re.compile(r"[\t\n\r\v\f]+")
TRUNCATED = " [cut]"  # ends a text clean_text shortened


def check_name(value: str, field: str, max_len: int, *, required: bool = True) -> None:
    """``value`` is a name of :data:`NAME_PATTERN` of at most ``max_len`` characters (or empty, if allowed)."""
    if not value:
        if required:
            raise ValidationError("must be a non-empty name", field=field)
        return
    if len(value) > max_len:
        raise ValidationError(f"is {len(value)} characters long; at most {max_len} allowed", field=field)
    if not _NAME.fullmatch(value):
        raise ValidationError(f"{value!r} is not a valid name: use letters, digits and . _ - : @ + = "
                              "(a letter or digit first)", field=field)


def check_text(value: str, field: str, max_len: int) -> None:
    """Free text (a user name, a model name): bounded, printable, no control characters."""
    if len(value) > max_len:
        raise ValidationError(f"is {len(value)} characters long; at most {max_len} allowed", field=field)
    if not value.isprintable():
        raise ValidationError("must not contain control characters", field=field)


def clean_text(value: str, max_len: int) -> str:
    """Free text from a peer made safe to keep and show: terminal escape sequences and control characters
    removed (line breaks and tabs become one space), then cut to ``max_len`` characters (ending in
    :data:`TRUNCATED` when cut). For text whose content matters more than its form (a health detail, a
    process's last words), where refusing the whole report would lose what it says."""
    if not value.isprintable():
        value = _ESCAPES.sub("", value)
        value = _SPACES.sub(" ", value)
        value = "".join(c for c in value if c.isprintable())
    if len(value) > max_len:
        value = value[:max(0, max_len - len(TRUNCATED))] + TRUNCATED
    return value


def check_number(value: float, field: str, low: float, high: float) -> None:
    """A finite number in ``[low, high]`` (NaN and the infinities refused)."""
    if not (value == value and low <= value <= high):
        raise ValidationError(f"must be a finite number in [{low:g}, {high:g}], got {value!r}", field=field)


def check_int(value: int, field: str, low: int, high: int) -> None:
    if not low <= value <= high:
        raise ValidationError(f"must be between {low} and {high}, got {value}", field=field)


def check_seconds(value: float, field: str, high: float, *, low: float = 0.0, positive: bool = False) -> None:
    """A finite number of seconds in ``[low, high]`` (``(low, high]`` with ``positive``)."""
    ok = value == value and low <= value <= high and not (positive and value <= low)
    if not ok:
        bound = f"> {low:g}" if positive else f">= {low:g}"
        raise ValidationError(f"must be a finite number {bound} and <= {high:g}, got {value!r}", field=field)


def check_command(command: Sequence[str], field: str = "command") -> None:
    if len(command) > MAX_COMMAND_ARGS:
        raise ValidationError(f"has {len(command)} arguments; at most {MAX_COMMAND_ARGS} allowed", field=field)
    size = 0
    for i, arg in enumerate(command):
        if "\0" in arg:
            raise ValidationError("must not contain a NUL character", field=f"{field}[{i}]")
        size += len(arg.encode())
    if size > MAX_COMMAND_BYTES:
        raise ValidationError(f"is {size} bytes long; at most {MAX_COMMAND_BYTES} allowed", field=field)


def check_env(env: dict[str, str], field: str = "env") -> None:
    if len(env) > MAX_ENV_VARS:
        raise ValidationError(f"has {len(env)} variables; at most {MAX_ENV_VARS} allowed", field=field)
    size = 0
    for key, value in env.items():
        if len(key) > MAX_ENV_NAME or not _ENV_NAME.fullmatch(key):
            raise ValidationError(f"{key[:40]!r} is not a variable name ({ENV_NAME_PATTERN}, at most "
                                  f"{MAX_ENV_NAME} characters)", field=field)
        if "\0" in value:
            raise ValidationError("must not contain a NUL character", field=f"{field}[{key}]")
        size += len(key.encode()) + len(value.encode())
    if size > MAX_ENV_BYTES:
        raise ValidationError(f"is {size} bytes long; at most {MAX_ENV_BYTES} allowed", field=field)
