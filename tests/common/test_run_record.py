"""The run record (code/mlperf/run_record.py): metadata.json written and read by one module, in today's format."""

import json
from pathlib import Path

import pytest

from code.mlperf.run_logs import TestResult
from code.mlperf.run_record import RunRecord, RunRecordError, mark_incomplete, read_record, write_record


def test_a_record_reads_back_as_written(tmp_path: Path) -> None:
    result = TestResult("Offline", "PerformanceOnly", str(tmp_path), metric="samples_per_second", value=5.0,
                        unit="samples/s", valid=True)
    write_record(tmp_path, RunRecord.of(result, round="v5.0", config={"fields": {"backend": "pytorch"}}))
    text = (tmp_path / "metadata.json").read_text()
    assert text == json.dumps({"result": result.to_dict(), "round": "v5.0", "config": {"fields": {
        "backend": "pytorch"}}}, indent=2, sort_keys=True) + "\n"
    record = read_record(tmp_path)
    assert record.result == result and record.complete and record.round == "v5.0"
    assert record.fields == {"backend": "pytorch"} and record.engine == {} and record.role is None


def test_an_older_record_without_later_keys_still_reads(tmp_path: Path) -> None:
    old = '{\n  "result": {\n    "complete": true,\n    "mode": "AccuracyOnly"\n  },\n  "system_name": "CPU"\n}\n'
    (tmp_path / "metadata.json").write_text(old)
    record = read_record(tmp_path)
    assert record.complete and record.round is None and record.devices == {} and record.system_name == "CPU"
    assert record.to_json() == old


def test_an_unfinished_test_is_marked_and_reads_as_incomplete(tmp_path: Path) -> None:
    mark_incomplete(tmp_path, "Server", "PerformanceOnly", "stopped", {"test_spec": {"x": 1}})
    record = read_record(tmp_path)
    assert not record.complete and record.result.verdict == "INCOMPLETE"
    assert record.result.invalid_reasons == ["stopped"] and record.data["test_spec"] == {"x": 1}


@pytest.mark.parametrize("text,message", [(None, "has no readable metadata.json"),
                                          ("{cut", "has no readable metadata.json"),
                                          ('["a list"]', "is not a run record")])
def test_a_missing_or_broken_record_is_a_clear_error(tmp_path: Path, text: str | None, message: str) -> None:
    if text is not None:
        (tmp_path / "metadata.json").write_text(text)
    with pytest.raises(RunRecordError, match=message):
        read_record(tmp_path)
