"""Raw Philly cluster_job_log JSON (shared/traces/README.md §1a)."""

from __future__ import annotations

import io
import json

import pytest
from trace_samples import BUNDLED

from halyard.datamodel import ValidationError
from halyard.traces import philly_raw, read_philly_raw, read_trace
from halyard.traces.philly_raw import iter_json_array

SAMPLE = BUNDLED / "philly_cluster_job_log_readme_examples.json"
EIGHT = [f"gpu{i}" for i in range(8)]


def attempt(start: object, end: object, *servers: tuple[str, list[str]]) -> dict:
    return {"start_time": start, "end_time": end, "detail": [{"ip": ip, "gpus": g} for ip, g in servers]}


def job(jobid: str, submitted: str = "2017-10-01 00:00:00", attempts: list | None = None, **kw) -> dict:
    entry = {"status": "Pass", "vc": "aa11bb", "jobid": jobid, "submitted_time": submitted, "user": "u1",
             "attempts": attempts if attempts is not None else
             [attempt("2017-10-01 00:01:00", "2017-10-01 00:11:00", ("m1", ["gpu0"]))]}
    entry.update(kw)
    return entry


def dump(tmp_path, entries: list, name: str = "log.json"):
    p = tmp_path / name
    p.write_text(json.dumps(entries, indent=4), encoding="utf-8")
    return p


def test_readme_examples() -> None:
    load = read_trace(SAMPLE)
    assert load.format == "philly-raw" and load.errors == () and not load.dropped
    by_id = {j.job_id: j for j in load.jobs}
    # Entry 1 (..._14199) is row 54 of the processed file: 8 GPUs, 74 + 193,182 s.
    a = by_id["application_1506638472019_14199"]
    assert (a.num_gpus, a.duration_s, a.tenant, a.user) == (8, 193_256.0, "ee9e8c", "ce2f4c")
    assert a.extra["status"] == "Pass" and a.extra["submitted_time"] == "2017-10-07 01:11:39"
    assert json.loads(a.extra["attempts"])[1]["detail"][0]["ip"] == "m412"
    # Entry 2 (..._10238): two servers of 4 GPUs in attempt 0; overlapping attempts are summed.
    b = by_id["application_1506638472019_10238"]
    assert b.num_gpus == 8
    assert b.duration_s == (3 * 86400 + 6 * 3600 + 18 * 60 + 1) + (11 * 3600 + 43 * 60 + 55)
    # Submitted 2017-10-05 14:49:31 and 2017-10-07 01:11:39: the earlier is t = 0.
    assert [j.job_id for j in load.jobs] == ["application_1506638472019_10238", "application_1506638472019_14199"]
    assert a.submit_time == 86400 + 10 * 3600 + 22 * 60 + 8


def test_agrees_with_processed_philly_row_54() -> None:
    from halyard.traces import read_philly

    processed = {j.job_id: j for j in read_philly(BUNDLED / "philly_sample.csv").jobs}["philly-54"]
    raw = {j.job_id: j for j in read_trace(SAMPLE).jobs}["application_1506638472019_14199"]
    assert (raw.duration_s, raw.num_gpus, raw.tenant) == (processed.duration_s, processed.num_gpus,
                                                          processed.tenant)


def test_quirks_none_times_and_drops(tmp_path) -> None:
    entries = [
        job("ok"),
        job("none-end", attempts=[attempt("2017-10-01 00:01:00", "2017-10-01 00:02:00", ("m1", EIGHT)),
                                  attempt("2017-10-01 00:03:00", "None", ("m2", EIGHT))]),
        job("no-attempts", attempts=[]),
        job("running", attempts=[attempt("2017-10-01 00:01:00", "None", ("m1", ["gpu0"]))]),
        job("never", attempts=[attempt("None", "None", ("m1", ["gpu0"]))]),
        job("no-gpus", attempts=[attempt("2017-10-01 00:01:00", "2017-10-01 00:02:00")]),
        job("zero", attempts=[attempt("2017-10-01 00:01:00", "2017-10-01 00:01:00", ("m1", ["gpu0"]))]),
        job("null-and-empty", attempts=[attempt("2017-10-01 00:01:00", "2017-10-01 00:01:30", ("m1", ["gpu0"])),
                                        attempt(None, "", ("m1", ["gpu0"]))]),
    ]
    load = read_philly_raw(dump(tmp_path, entries))
    assert load.errors == ()
    durations = {j.job_id: j.duration_s for j in load.jobs}
    # An attempt without an end time adds nothing; the GPU count is attempt 0's.
    assert durations == {"ok": 600.0, "none-end": 60.0, "null-and-empty": 30.0}
    assert {j.job_id: j.num_gpus for j in load.jobs}["none-end"] == 8
    assert load.dropped == {philly_raw.DROP_NO_ATTEMPTS: 1, philly_raw.DROP_NO_COMPLETE_ATTEMPT: 2,
                            philly_raw.DROP_NO_GPUS: 1, philly_raw.DROP_ZERO_RUN: 1}


def test_malformed_entries(tmp_path) -> None:
    entries = [
        job("a"),
        [1, 2],
        job("b", submitted="2017-10-01T00:00:00"),
        job("c", vc=""),
        job("d", attempts=[attempt("2017-10-01 00:05:00", "2017-10-01 00:01:00", ("m1", ["gpu0"]))]),
        job("e", attempts=[attempt("yesterday", "2017-10-01 00:01:00", ("m1", ["gpu0"]))]),
        job("f", attempts="none"),
        {k: v for k, v in job("g").items() if k != "jobid"},
        job("a"),
        job("h", attempts=[{"start_time": "2017-10-01 00:01:00", "end_time": "2017-10-01 00:02:00",
                            "detail": [{"ip": "m1"}]}]),
        job("i", submitted="2017-09-30 23:00:00"),
    ]
    p = dump(tmp_path, entries)
    lines = p.read_text().splitlines()
    starts = [n for n, text in enumerate(lines, start=1) if text in ("    {", "    [")]
    load = read_philly_raw(p)
    assert [(e.line, e.field) for e in load.errors] == [
        (starts[1], None), (starts[2], "submitted_time"), (starts[3], "vc"), (starts[4], "attempts[0].end_time"),
        (starts[5], "attempts[0].start_time"), (starts[6], "attempts"), (starts[7], "jobid"),
        (starts[8], "job_id"), (starts[9], "attempts[0].detail[0].gpus")]
    assert [(j.job_id, j.submit_time) for j in load.jobs] == [("i", 0.0), ("a", 3600.0)]
    with pytest.raises(ValidationError) as info:
        read_philly_raw(p, strict=True)
    assert info.value.line == starts[1]


@pytest.mark.parametrize("text, line, message", [
    ('[\n{"jobid": "a",\n "vc": x}\n]', 3, "not valid JSON"),
    ('{"jobid": "a"}', 1, "expected a JSON array"),
    ('[\n{"jobid": "a"}\n', 3, "not closed"),
    ('[\n{"a": 1}\n{"b": 2}]', 3, "expected ',' or ']'"),
    ('[{"a": 1}] x', 1, "after the closing"),
])
def test_broken_json_is_an_error_of_the_file(tmp_path, text, line, message) -> None:
    p = tmp_path / "bad.json"
    p.write_text(text)
    with pytest.raises(ValidationError) as info:
        read_philly_raw(p)
    assert info.value.line == line and message in str(info.value)


def test_incremental_reader_across_tiny_chunks(monkeypatch) -> None:
    values = [{"a": "x" * 30, "n": 12345678901234}, [1, 2.5, None], "s", 42, {"nested": {"k": ["v", "w"]}}]
    text = "[\n" + ",\n".join(json.dumps(v) for v in values) + "\n]\n"
    monkeypatch.setattr(philly_raw, "_CHUNK_CHARS", 3)
    got = list(iter_json_array(io.StringIO(text), "mem"))
    assert [v for _, v in got] == values
    assert [line for line, _ in got] == [2, 3, 4, 5, 6]
    assert list(iter_json_array(io.StringIO("[ ]"), "mem")) == []


def test_reads_incrementally(tmp_path, monkeypatch) -> None:
    # With 64-character reads, no read ever holds more than one small entry plus a chunk.
    entries = [job(f"j{k}") for k in range(50)]
    p = dump(tmp_path, entries)
    monkeypatch.setattr(philly_raw, "_CHUNK_CHARS", 64)
    seen: list[int] = []
    real_more = philly_raw._ArrayReader._more

    def spy(self):
        seen.append(len(self.buf) - self.pos)
        return real_more(self)

    monkeypatch.setattr(philly_raw._ArrayReader, "_more", spy)
    load = read_philly_raw(p)
    assert len(load.jobs) == 50
    assert max(seen) < 600 < p.stat().st_size / 10
