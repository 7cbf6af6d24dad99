"""The raw Philly job log, ``cluster_job_log`` (msr-fiddle/philly-traces, JSON).

One JSON array of job objects (``shared/traces/README.md`` §1a)::

    [{"status": "Pass", "vc": "ee9e8c", "jobid": "application_1506638472019_14199",
      "submitted_time": "2017-10-07 01:11:39", "user": "ce2f4c",
      "attempts": [{"start_time": "...", "end_time": "...",
                    "detail": [{"ip": "m47", "gpus": ["gpu0", ...]}]}, ...]}, ...]

The whole trace is a 6.6 GB array, so it is read incrementally: one array
element at a time (:func:`iter_json_array`), never the whole file.

Rules (``docs/trace-format.md``):

* Times are ``YYYY-MM-DD HH:MM:SS`` without a zone: Philly local time (most
  likely US-Pacific; undocumented), read as a naive wall clock, as for the
  processed Philly file. ``submit_time`` = ``submitted_time`` minus the earliest
  one read.
* A missing attempt time is the string ``"None"`` (also accepted: ``""`` and JSON
  ``null``).
* ``job_id`` = ``jobid``, ``tenant`` = ``vc``, ``user`` = ``user``.
* ``num_gpus`` = the GPUs of the first attempt, summed over its servers
  (``sum(len(d["gpus"]) for d in attempts[0]["detail"])``, as the upstream
  notebook does).
* ``duration_s`` = the sum over attempts of ``end_time - start_time``, counting
  attempts that have both times (the rule that reproduces the processed Philly
  file: README job ``..._14199`` gives 74 + 193,182 = 193,256 s there).
  Overlapping attempts are summed as they are. ``iterations`` = 0.
* Dropped, not errors: jobs with no attempts, jobs whose first attempt holds
  no GPU, jobs with no attempt that has both times (still running when the log
  was taken, or never started), jobs whose attempts add up to 0 s.
* Bad rows: an entry that is not an object, a missing or mistyped key, a time
  that does not parse, an attempt that ends before it starts. The line is the
  one where the entry's ``{`` is.
* ``model``: the seeded rule keyed by ``jobid``.
* ``extra``: ``status``, ``vc``, ``submitted_time`` as written and ``attempts``
  (the attempts list as compact JSON).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator, Sequence
from typing import Any, TextIO

from halyard.datamodel import ValidationError
from halyard.traces.assign import text_key
from halyard.traces.generator import SYNERGY_DEFAULT_SPLIT
from halyard.traces.loading import TraceBuilder, check_file, frozen, guard_unicode, naive_datetime
from halyard.traces.schema import TraceLoad

PHILLY_RAW_FORMAT = "philly-raw"
MISSING_TIMES = ("None", "", None)  # how the log writes a missing attempt time
_CHUNK_CHARS = 1 << 16
_MAX_ENTRY_CHARS = 1 << 24  # a job object larger than this is treated as a syntax error
_WS = re.compile(r"[ \t\n\r]*")

DROP_NO_ATTEMPTS = "no attempts"
DROP_NO_GPUS = "first attempt holds no GPU"
DROP_NO_COMPLETE_ATTEMPT = "no attempt with both start and end time (running or never started)"
DROP_ZERO_RUN = "attempts add up to 0 s"


def looks_like_philly_raw(head: Any) -> bool:
    text = head.text.lstrip()
    return text.startswith("[") and '"jobid"' in text and '"attempts"' in text


class _ArrayReader:
    """Incremental reader of a top-level JSON array of values."""

    def __init__(self, f: TextIO, source: str) -> None:
        self.f = f
        self.source = source
        self.buf = ""
        self.pos = 0
        self.line = 1
        self.eof = False
        self.decoder = json.JSONDecoder()

    def _more(self) -> bool:
        data = self.f.read(_CHUNK_CHARS)
        if not data:
            self.eof = True
            return False
        self.buf = self.buf[self.pos:] + data
        self.pos = 0
        return True

    def _peek(self) -> str | None:
        """The next non-whitespace character (not consumed), or None at the end of the file."""
        while True:
            blank = _WS.match(self.buf, self.pos)  # matches, if only the empty string
            end = blank.end() if blank is not None else self.pos
            self.line += self.buf.count("\n", self.pos, end)
            self.pos = end
            if self.pos < len(self.buf):
                return self.buf[self.pos]
            if not self._more():
                return None

    def _fail(self, msg: str, pos: int | None = None) -> ValidationError:
        at = self.line + (self.buf.count("\n", self.pos, pos) if pos is not None else 0)
        return ValidationError(msg, source=self.source, line=at)

    def _value(self) -> tuple[int, Any]:
        while True:
            try:
                value, end = self.decoder.raw_decode(self.buf, self.pos)
                if end == len(self.buf) and not self.eof and self._more():
                    continue  # a number at the end of the buffer may go on
            except json.JSONDecodeError as err:
                if not self.eof and len(self.buf) - self.pos < _MAX_ENTRY_CHARS and self._more():
                    continue  # the entry goes on in the next chunk
                raise self._fail(f"not valid JSON ({err.msg})", err.pos) from None
            start = self.line
            self.line += self.buf.count("\n", self.pos, end)
            self.pos = end
            return start, value

    def __iter__(self) -> Iterator[tuple[int, Any]]:
        if self._peek() != "[":
            raise self._fail("expected a JSON array ('[') of job objects")
        self.pos += 1
        if self._peek() == "]":
            self.pos += 1
        else:
            while True:
                if self._peek() is None:
                    raise self._fail("the array is not closed (']' missing)")
                yield self._value()
                nxt = self._peek()
                if nxt == ",":
                    self.pos += 1
                    continue
                if nxt == "]":
                    self.pos += 1
                    break
                raise self._fail("expected ',' or ']' after an array entry" if nxt else
                                 "the array is not closed (']' missing)")
        if self._peek() is not None:
            raise self._fail("unexpected text after the closing ']'")


def iter_json_array(f: TextIO, source: str) -> Iterator[tuple[int, Any]]:
    """``(line, value)`` for each element of the JSON array in ``f``, read incrementally.

    ``line`` is where the element starts. Malformed JSON raises a
    :class:`ValidationError` naming the file and line: after a syntax error the
    rest of the array cannot be trusted, so it is an error of the file.
    """
    return iter(_ArrayReader(f, source))


def read_philly_raw(path: str | os.PathLike[str], *, strict: bool = False, seed: int = 0,
                    split: Sequence[float] = SYNERGY_DEFAULT_SPLIT) -> TraceLoad:
    """Read a Philly ``cluster_job_log`` JSON file (module docstring for the rules)."""
    p, source = check_file(path)

    def run() -> TraceLoad:
        b = TraceBuilder(PHILLY_RAW_FORMAT, source, strict=strict, seed=seed, split=split)
        with p.open(encoding="utf-8-sig") as f:
            for line, entry in iter_json_array(f, source):
                try:
                    parsed = _job(entry, b)
                except ValidationError as err:
                    b.error(err, line)
                    continue
                if parsed is not None:
                    job_id, time, fields = parsed
                    b.add(line=line, time=time, job_id=job_id, fields=fields, key=text_key(job_id))
        return b.finish()

    return guard_unicode(source, run)


def _text(obj: dict[str, Any], key: str, where: str = "", *, empty_ok: bool = False) -> str:
    value = obj.get(key)
    if not isinstance(value, str) or (not value and not empty_ok):
        got = "missing" if key not in obj else f"got {json.dumps(value)}"
        raise ValidationError(f"must be a non-empty string ({got})", field=where + key)
    return value


def _list(obj: dict[str, Any], key: str, where: str = "") -> list[Any]:
    value = obj.get(key)
    if not isinstance(value, list):
        got = "missing" if key not in obj else f"got {json.dumps(value)[:40]}"
        raise ValidationError(f"must be a list ({got})", field=where + key)
    return value


def _time(value: Any, field: str) -> float | None:
    if value in MISSING_TIMES:
        return None
    if not isinstance(value, str):
        raise ValidationError(f"must be a time string or \"None\", got {json.dumps(value)}", field=field)
    return naive_datetime(value, field)


def _gpus(attempt: dict[str, Any], where: str) -> int:
    total = 0
    for k, server in enumerate(_list(attempt, "detail", where)):
        if not isinstance(server, dict):
            raise ValidationError("must be an object with ip and gpus", field=f"{where}detail[{k}]")
        total += len(_list(server, "gpus", f"{where}detail[{k}]."))
    return total


def _job(entry: Any, b: TraceBuilder) -> tuple[str, float, dict[str, Any]] | None:
    if not isinstance(entry, dict):
        raise ValidationError(f"each array entry must be a job object, got {type(entry).__name__}")
    job_id = _text(entry, "jobid")
    submitted_text = _text(entry, "submitted_time")
    submitted = naive_datetime(submitted_text, "submitted_time")
    vc = _text(entry, "vc")
    user = _text(entry, "user", empty_ok=True)
    status = _text(entry, "status")
    attempts = _list(entry, "attempts")
    run = 0.0
    complete = 0
    gpus = 0
    for i, attempt in enumerate(attempts):
        where = f"attempts[{i}]."
        if not isinstance(attempt, dict):
            raise ValidationError("must be an object", field=f"attempts[{i}]")
        start = _time(attempt.get("start_time"), where + "start_time")
        end = _time(attempt.get("end_time"), where + "end_time")
        count = _gpus(attempt, where)
        if i == 0:
            gpus = count
        if start is not None and end is not None:
            if end < start:
                raise ValidationError(f"is before start_time ({attempt['end_time']} < {attempt['start_time']})",
                                      field=where + "end_time")
            run += end - start
            complete += 1
    if not attempts:
        b.drop(DROP_NO_ATTEMPTS)
        return None
    if gpus == 0:
        b.drop(DROP_NO_GPUS)
        return None
    if complete == 0:
        b.drop(DROP_NO_COMPLETE_ATTEMPT)
        return None
    if run == 0:
        b.drop(DROP_ZERO_RUN)
        return None
    extra = {"status": status, "vc": vc, "submitted_time": submitted_text,
             "attempts": json.dumps(attempts, separators=(",", ":"))}
    fields = {"num_gpus": gpus, "duration_s": run, "tenant": vc, "user": user, "extra": frozen(extra)}
    return job_id, submitted, fields
