"""scripts/gpu/check_cross_compile.py without a GPU: its naming, table and record choice, and the cross-compile itself
(``--specs``), which needs Triton and its bundled ptxas but no GPU and no driver.

The compile runs in a subprocess: tests/conftest.py sets TRITON_INTERPRET=1 for this process, under which
``@triton.jit`` makes interpreter functions that ``triton.compile`` cannot take. ``test_recorded_kernels_compile_as_
on_the_gpu`` compiles tests/fixtures/cross_compile_specs.json, the few specializations a GPU run recorded (its
``--record`` file; CROSS_COMPILE_SPECS names another, e.g. a GPU run's full kernel_specs.json), for sm_80 and sm_90
and expects each outcome the GPU run had.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from code.common.paths import REPO_ROOT
from scripts.gpu import cross_compile as xc

RECORDED = Path(os.environ.get("CROSS_COMPILE_SPECS", REPO_ROOT / "tests" / "fixtures" / "cross_compile_specs.json"))
RERECORD = ("record them on a GPU: PYTHONPATH=$PWD python3 scripts/gpu/check_cross_compile.py --out $OUT, then copy "
            "$OUT/cross_compile_specs.json to tests/fixtures/")


def spec(kernel: str, signature: dict[str, str], constants: dict[str, object], warps: int = 4) -> dict:
    names = list(signature)
    return {"kernel": kernel, "signature": signature, "attrs": [[[0], [["tt.divisibility", 16]]]],
            "constants": [[[names.index(k)], v] for k, v in constants.items()],
            "options": {"num_warps": warps, "num_stages": 3}, "native": {"arch": 90, "hash": kernel, "shared": 0}}


LN_SIGNATURE = {"x_ptr": "*fp16", "q_ptr": "*fp8e4nv", "cu_ptr": "*i32", "eps": "fp32", "N": "constexpr",
                "WRITE_FP8": "constexpr"}


def test_rows_name_the_dtypes_and_what_tells_a_kernels_specializations_apart():
    specs = [
        spec("code.bert.k._ln", LN_SIGNATURE, {"N": 1024, "WRITE_FP8": True}),
        spec("code.bert.k._ln", {**LN_SIGNATURE, "q_ptr": "*fp16"}, {"N": 1024, "WRITE_FP8": False}),
        spec("code.bert.k._ln", {**LN_SIGNATURE, "q_ptr": "*fp16"}, {"N": 1024, "WRITE_FP8": False}, warps=8),
        spec("code.gptj.a._decode", {"q_ptr": "*bf16", "KEYS": "constexpr"}, {"KEYS": 64}),
    ]
    assert xc.row_names(specs) == [
        "bert.k._ln[fp16+fp8e4nv WRITE_FP8 w4s3]",  # N is the same in all three: left out; int pointers too
        "bert.k._ln[fp16 w4s3]",
        "bert.k._ln[fp16 w8s3]",
        "gptj.a._decode[bf16]",
    ]
    twins = [spec("code.k._f", LN_SIGNATURE, {"N": 1}), spec("code.k._f", LN_SIGNATURE, {"N": 1})]
    twins[1]["attrs"] = []  # differ only in divisibility: numbered
    assert xc.row_names(twins) == ["k._f[fp16+fp8e4nv #1]", "k._f[fp16+fp8e4nv #2]"]


def test_the_table_has_a_column_per_target_and_short_reasons():
    results = {
        "a._k[fp16]": {"sm_80": {"ok": True, "error": None}, "sm_90": {"ok": True, "error": None}},
        "a._k[fp8e4nv]": {
            "sm_80": {"ok": False, "error": "ValueError: type fp8e4nv not supported in this architecture. The ..."},
            "sm_90": {"ok": False, "error": "OutOfResources: shared memory 240000 B > 232448 B, the most ..."},
        },
    }
    lines = xc.table(results, ["sm_80", "sm_90"])
    assert lines[0].split() == ["kernel", "sm_80", "sm_90"]
    assert lines[1].split() == ["a._k[fp16]", "ok", "ok"]
    assert lines[2].split() == ["a._k[fp8e4nv]", "FAIL(no", "e4m3)", "FAIL(smem", "234K>227K)"]
    assert lines[0].index("sm_90") == lines[2].index("FAIL(smem")  # aligned columns
    assert xc.short_reason("PTXASError: ptxas fatal   : Value 'sm_100a' is not defined for option 'gpu-name'"
                           ).startswith("ptxas fatal : Value 'sm_100a")


def test_the_record_keeps_one_spec_per_kernel_and_kind_of_outcome():
    specs = [spec("code.k._a", LN_SIGNATURE, {"WRITE_FP8": w}) for w in (True, False, True)]
    specs.append(spec("code.k._b", LN_SIGNATURE, {}))
    rows = ["k._a[x]", "k._a[y]", "k._a[z]", "k._b[x]"]
    fp8_fail = {"ok": False, "error": "ValueError: type fp8e4nv not supported in this architecture"}
    ok = {"ok": True, "error": None}
    results = {"k._a[x]": {"sm_80": fp8_fail, "sm_90": ok}, "k._a[y]": {"sm_80": ok, "sm_90": ok},
               "k._a[z]": {"sm_80": fp8_fail, "sm_90": ok}, "k._b[x]": {"sm_80": ok, "sm_90": ok}}
    assert xc.pick_for_record(specs, rows, results) == [0, 1, 3]


def test_the_llama_step_runs_on_the_tiny_config(monkeypatch):
    """The step's engines (16-bit and FP8 GEMMs, each over a 16-bit and an FP8 KV cache, every split count of
    DECODE_SPLITS) run end to end on a CPU,
    each decode under its count's launch: only the GPU run compiles kernels, but a step broken by a change in the
    engine (or one whose launches no longer reach the kernel) shows here first."""
    from code.llama31.architecture import LLAMA_CONFIGS
    from code.llm import paged_attention
    from scripts.gpu import check_cross_compile as check

    seen = []
    attend = paged_attention.decode_attention

    def recording(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202 - decode_attention's own signature
        seen.append(args[5]["SPLITS"])
        return attend(*args, **kwargs)

    monkeypatch.setattr(paged_attention, "decode_attention", recording)
    before = len(check.ROWS)
    check.exercise_llama("cpu", LLAMA_CONFIGS["tiny"])
    rows = check.ROWS[before:]
    assert rows and not any("FAILED" in row for row in rows), rows
    assert rows[-1].startswith("llama: 4 engines ran") and f"splits {check.DECODE_SPLITS}" in rows[-1], rows
    assert "fp8 GEMMs, fp8 KV" in rows[-1]
    assert sorted(set(seen)) == sorted(check.DECODE_SPLITS)
    assert max(check.DECODE_SPLITS) % 16  # a multiple of 16 would be another specialization of the split kernel


def test_skip_names_the_steps_and_compile_only_skips_on_a_gpu(capsys):
    from scripts.gpu import check_cross_compile as check

    args = check.parse_args(["--skip=compile,bert"], gpu=True)
    assert args.skip == {"compile", "bert"}
    for argv, gpu, said in ((["--skip=bret"], True, "unknown steps ['bret']"),
                            (["--skip=compile", "--specs", "x.json"], False, "leaves nothing to do"),
                            (["--skip=compile"], False, "no GPU here")):
        with pytest.raises(SystemExit):
            check.parse_args(argv, gpu=gpu)
        assert said in capsys.readouterr().err


QUANTIZE = spec("code.numerics.fp8._quantize_kernel",
                {"x_ptr": "*fp16", "q_ptr": "*fp8e4nv", "inv_scale": "fp32", "scale_ptr": "*fp16", "n": "i32",
                 "BLOCK": "constexpr", "SCALE_IN_MEMORY": "constexpr"}, {"BLOCK": 2048, "SCALE_IN_MEMORY": False})


def _discover_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """``main`` with ``--skip=compile`` as on a GPU: the GPU steps stand idle and report one recorded
    specialization, as if their launches had compiled it. Returns the run's --out."""
    from scripts.gpu import check_cross_compile as check

    monkeypatch.setattr(check.torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(check.torch.cuda, "get_device_name", lambda: "a GPU stand-in")
    monkeypatch.setattr(check.torch.cuda, "get_device_capability", lambda: (9, 0))
    for name in ("exercise_bert", "exercise_gptj", "exercise_llama"):
        monkeypatch.setattr(check, name, lambda *_args: None)
    monkeypatch.setattr(check, "captured", lambda: ({}, [json.loads(json.dumps(QUANTIZE))]))
    monkeypatch.setattr(check.xc, "import_kernel_modules", lambda: {})
    monkeypatch.setattr(check, "ROWS", [])
    out = tmp_path / "gpu"
    monkeypatch.setattr(sys, "argv", ["check_cross_compile.py", "--skip=compile", "--out", str(out)])
    check.main()
    return out


def test_discovery_only_writes_the_specs_without_compiling(tmp_path, monkeypatch):
    out = _discover_only(tmp_path, monkeypatch)
    report = json.loads((out / "check_cross_compile.json").read_text())
    assert set(report["step_s"]) == {"bert", "gptj", "llama", "record"} and "kernels" not in report
    for name in ("kernel_specs.json", "cross_compile_specs.json"):
        specs = xc.read_specs(out / name)
        assert "discovery only" in specs["source"]
        (recorded,) = specs["specs"]
        assert recorded["kernel"] == QUANTIZE["kernel"] and recorded["expected"] == {}, recorded


def test_help_describes_the_cpu_path():
    result = subprocess.run([sys.executable, "scripts/gpu/check_cross_compile.py", "--help"], cwd=REPO_ROOT,
                            env={"PYTHONPATH": str(REPO_ROOT), "PATH": "/usr/bin:/bin"}, capture_output=True,
                            text=True, timeout=120, check=True)
    text = " ".join(result.stdout.split())
    assert "--specs" in text and "no GPU needed" in text and "--record" in text


def _compile(specs_file: Path, out: Path, *more: str) -> dict:
    """Run the script's --specs path for sm_80 and sm_90 in a process of its own (no interpreter mode)."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = str(REPO_ROOT)
    result = subprocess.run([sys.executable, "scripts/gpu/check_cross_compile.py", "--specs", str(specs_file),
                             "--targets", "sm_80,sm_90", "--workers", "2", "--out", str(out), *more], cwd=REPO_ROOT,
                            env=env, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return json.loads((out / "check_cross_compile.json").read_text())


@pytest.fixture(scope="module")
def ptxas() -> str:
    """Skips without triton (the CPU torch wheel doesn't pull it: `make setup_kernel_tests` installs it) or without
    the ptxas Triton bundles."""
    if importlib.util.find_spec("triton") is None:
        pytest.skip("triton is not installed: `make setup_kernel_tests`")
    from triton.backends.nvidia.compiler import get_ptxas

    try:
        return get_ptxas(90).path
    except RuntimeError as error:
        pytest.skip(f"no ptxas for triton: {error}")


def test_a_kernel_compiles_for_sm_90_and_not_for_sm_80_without_a_gpu(ptxas, tmp_path):
    """The quantize kernel writes e4m3, which Triton takes from compute capability 8.9 on: CPU-only evidence that
    the cross-compile runs, and that its failures are reported as results."""
    import triton

    record = json.loads(json.dumps(QUANTIZE))
    record["expected"] = {"sm_80": {"ok": False, "error": None}, "sm_90": {"ok": True, "error": None}}
    path = tmp_path / "specs.json"
    path.write_text(json.dumps({"format": xc.FORMAT, "triton": triton.__version__, "source": "this test",
                                "specs": [record]}))
    report = _compile(path, tmp_path)
    (row,) = report["kernels"]
    cells = report["kernels"][row]
    assert "fp8e4nv not supported" in cells["sm_80"]["error"], cells
    assert cells["sm_90"]["ok"] and cells["sm_90"]["seconds"] > 0 and cells["sm_90"]["shared"] >= 0, cells
    assert report["differ_from_recording"] == [] and report["stale"] == []


def test_recorded_kernels_compile_as_on_the_gpu(ptxas, tmp_path):
    if not RECORDED.is_file():
        pytest.skip(f"no recorded specializations at {RECORDED}: {RERECORD}")
    recorded = xc.read_specs(RECORDED)
    report = _compile(RECORDED, tmp_path)
    assert report["stale"] == [], f"records no longer match their kernels: {report['stale']}; {RERECORD}"
    assert len(report["kernels"]) == len(recorded["specs"])
    differ = [f"{d['row']} {d['target']}: recorded ok={d['recorded']['ok']}, now {d['now']['error'] or 'ok'}"
              for d in report["differ_from_recording"]]
    assert not differ, (f"{len(differ)} outcomes differ from the GPU run's ({recorded['source']}, Triton "
                        f"{recorded['triton']}; here {report['triton']}):\n" + "\n".join(differ))


def test_a_discovery_only_recording_compiles_without_a_gpu_into_the_record(ptxas, tmp_path, monkeypatch):
    """The split run's two halves: the GPU half's kernel_specs.json (no outcomes), compiled here with --record,
    gives the CPU test's record with this compile's outcomes."""
    out = _discover_only(tmp_path, monkeypatch)
    record = tmp_path / "record.json"
    report = _compile(out / "kernel_specs.json", tmp_path / "cpu", "--record", str(record))
    assert report["differ_from_recording"] == [] and report["stale"] == []
    (recorded,) = xc.read_specs(record)["specs"]
    assert not recorded["expected"]["sm_80"]["ok"] and "fp8e4nv not supported" in recorded["expected"]["sm_80"]["error"]
    assert recorded["expected"]["sm_90"] == {"ok": True, "error": None}
