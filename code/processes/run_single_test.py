"""One LoadGen test in this process: ``python -m code.processes.run_single_test <test_spec.json>``.

One process per test, because LoadGen reads its config once per process. It writes user.conf, runs the C++ core,
scores accuracy runs and leaves metadata.json for the parent's summary, all in the test's log folder alone.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from code.common.constants import SERVER_LATENCY_BOUND_NS, ExitCode, Scenario, TestMode
from code.common.faults import describe
from code.common.host_load import HostReader
from code.common.log import configure, get_logger
from code.common.paths import REPO_ROOT
from code.common.supervision import die_with_parent
from code.common.systems import detect_system
from code.config.fields import plan_note
from code.config.resolve import device_share, loadgen_model, scales_qps
from code.config.resolved import ResolvedConfig
from code.harness.cluster import ClusterSettings
from code.harness.core import SAMPLE_TIMES_FILE, CoreSettings
from code.harness.progress import (
    PERIOD_S,
    PROGRESS_TTY_ENV,
    TTY_PERIOD_S,
    ProgressReporter,
    ProgressShape,
    min_duration_s,
)
from code.mlperf.audits import write_baseline_log
from code.mlperf.benchmarks import AccuracyReport, PreparedTest, load_benchmark
from code.mlperf.power import NoPower, PowerSampler, power_sampler
from code.mlperf.run_logs import TestResult, check_loadgen_logs, performance_result, read_detail_log
from code.mlperf.run_record import RunRecord, write_record
from code.mlperf.user_conf import qsl_performance_sample_count, write_user_conf
from code.mlperf.verdicts import not_submittable_reasons
from code.processes.run_devices import run_on_devices
from code.processes.test_process import resolve_from_spec

log = get_logger("run_single_test")


def versions(round_name: str) -> dict[str, Any]:
    """Software that shaped the result, for metadata.json."""
    found: dict[str, Any] = {"python": platform.python_version()}
    with contextlib.suppress(ImportError):
        import torch

        found.update(torch=torch.__version__, cuda=torch.version.cuda)
    try:
        from code.harness.core import loadgen_version

        found["loadgen"] = loadgen_version(round_name)
    except Exception as error:  # not built: reported, not fatal for metadata
        found["loadgen"] = f"unavailable ({error})"
    try:
        found["harness_commit"] = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO_ROOT, capture_output=True,
                                                 text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        found["harness_commit"] = None
    return found


def run_single_test(spec: dict[str, Any], spec_file: Path) -> TestResult:
    """Run the test ``spec`` describes (``spec_file`` holds it: a several-device test's workers read it too)."""
    from code.harness.core import progress, run_test, timeline

    config = resolve_from_spec(spec)
    for name in spec.get("probed", []):  # given to the child as overrides, but measured by the probe before it
        config.sources[name] = "probe"
    mode = TestMode(spec["mode"])
    log_dir = Path(spec["log_dir"])
    benchmark = load_benchmark(config.benchmark)

    started = time.time()
    engine = spec.get("engine") or {}
    if engine.get("summary"):
        log.info("engine: %s", engine["summary"])
    prepared = benchmark.prepare_test(config, mode)
    provenance = prepared.provenance
    invalid_because = provenance.get("invalid_because", [])
    if invalid_because:
        print("*" * 100)
        print(f"* NOT a submittable MLPerf result: {'; '.join(invalid_because)}.")
        print(f"* model: {provenance.get('model')}; inputs: {provenance.get('inputs')}; "
              f"weights: {provenance.get('weights')}")
        print("*" * 100, flush=True)
    system = detect_system()
    system_gpus = len(system.gpus)
    share = device_share(prepared.devices, system_gpus) if scales_qps(config) else 1.0
    # The resolution scaled the rate by the share --devices names; only a share it could not see (GPUs hidden by
    # CUDA_VISIBLE_DEVICES) is left to scale here.
    rest = share / config.device_share if scales_qps(config) else 1.0
    if share < 1.0:
        log.info("%d of the system's %d GPUs run: the config's expected QPS is scaled by %.3g", len(prepared.devices),
                 system_gpus, share)
    user_conf, settings = test_settings(config, mode, prepared, log_dir, rest, spec.get("probe_samples"))
    loaded = time.time()
    log.debug("LoadGen settings: %s; user.conf: %s", settings, user_conf)

    cluster = ClusterSettings(config["cluster"], config["cluster_host"], config["cluster_port"],
                              float(config["cluster_ready_timeout_s"])) if config["cluster"] else None
    power: PowerSampler | NoPower = NoPower("the test did not reach LoadGen")

    def run_loadgen(runners: list[Any], device_names: list[str]) -> None:
        nonlocal loaded, power
        loaded = time.time()
        log.info("loaded in %.1f s; starting LoadGen", loaded - started)
        if mode is TestMode.PerformanceOnly and (note := plan_note(config.scenario, config.values)):
            log.info("%s", note)  # a large plan is silent for seconds to minutes before the first progress line
        # Read from here, every device ready, to after LoadGen returns: the readings bracket its timed part. The
        # host's load is read during a performance test, whose figure it can lower.
        host = HostReader() if mode is TestMode.PerformanceOnly else None
        power = power_sampler(device_names, why_not_power(mode, cluster), host=host)
        # Lines every 15 s; every second when the parent redraws them in place on a terminal.
        period_s = TTY_PERIOD_S if os.environ.get(PROGRESS_TTY_ENV) else PERIOD_S
        with power, ProgressReporter(lambda: progress(settings.round), progress_shape(config, user_conf), period_s):
            run_test(settings, prepared.sample_lengths, runners, device_names=device_names)

    report = run_on_devices(prepared, spec_file, config["num_workers"], config["round"], run_loadgen,
                            cluster=cluster)
    log.info("LoadGen finished in %.1f s", time.time() - loaded)
    times = timeline(settings.round).with_lengths(prepared.sample_lengths).with_device_names(report.devices)
    try:  # the core's per-sample times, for the run report: a full disk costs the file, not the result
        times.save(log_dir / SAMPLE_TIMES_FILE)
    except OSError as error:
        log.warning("%s not saved: %s", SAMPLE_TIMES_FILE, error)
    check_loadgen_logs(log_dir)  # before any figure is read from them: a full disk leaves them cut short

    audit = spec.get("audit")  # {"test": "TEST01", "reference_accuracy_log": path} for a compliance audit
    audit_accuracy = None
    if audit and audit["test"] == "TEST01":
        audit_accuracy = score_test01(prepared.evaluate_accuracy, log_dir, Path(audit["reference_accuracy_log"]))
    if mode is TestMode.AccuracyOnly:
        accuracy = prepared.evaluate_accuracy(log_dir)
        result = TestResult(config.scenario.value, mode.value, str(log_dir), metric=accuracy.metric,
                            value=accuracy.value, unit=accuracy.unit, valid=bool(accuracy.passed),
                            accuracy=accuracy.as_dict())
        result.invalid_reasons.extend(accuracy.failures)
    else:
        result = performance_result(log_dir, config.scenario)
    result.not_submittable = not_submittable_reasons(config, mode, provenance, read_detail_log(log_dir),
                                                     prepared.total_sample_count,
                                                     audit_test=audit["test"] if audit else None)
    result.extra["seconds"] = round(time.time() - started, 1)

    software = versions(config["round"])
    write_record(log_dir, RunRecord.of(result, **{
        # What staging and audits read to match runs to a round's tools: the round and the LoadGen that ran.
        "round": config["round"], "loadgen_version": software["loadgen"],
        "config": config.as_dict(), "system": system.describe(), "system_name": config.system, "provenance": provenance,
        # Which engine of the config's ladder ran and why (code/tuning/accuracy_gate.py); {} before ladders existed.
        "engine": engine, "versions": software, "user_conf": user_conf.read_text(), "command": sys.argv,
        "devices": {"used": report.devices, "expected_qps_share": share, "completed": times.per_device(),
                    "loadgen_process": report.loadgen_host, **({"workers": report.workers} if report.workers else {})},
        # GPU power over the timed part and samples per joule (code/mlperf/power.py); null, with why, if not read;
        # and the host's load over it (code/common/host_load.py).
        **power.section(read_detail_log(log_dir), len(times.index)),
        **({"engine_stats": report.engine_stats} if report.engine_stats else {}),
        **({"audit_accuracy": audit_accuracy} if audit_accuracy else {}),
        # How the harness tuned this test's expected rate or latency first (a stored value, a probe), if it did.
        **({"tuning": spec["tuning"]} if spec.get("tuning") else {}),
        # "probe": a --test_run's probe, which only sized the test's query (its report's title says so).
        **({"role": spec["role"]} if spec.get("role") else {}),
    }))
    from code.report.pages import write_test_report

    try:
        write_test_report(log_dir)
    except Exception as error:  # noqa: BLE001 - the result is recorded; the report is a convenience
        log.warning("report.md not written: %s: %s", type(error).__name__, error)
    return result


def why_not_power(mode: TestMode, cluster: ClusterSettings | None) -> str | None:
    """Why a test's GPU power is not read, or None when it is: power counts over a performance test's timed part,
    and NVML reads only this machine's GPUs."""
    if mode is not TestMode.PerformanceOnly:
        return "not a performance test: power is read over a performance test's timed part"
    if cluster is not None:
        return "a cluster run: its GPUs are on other nodes, which NVML in the LoadGen process cannot read"
    return None


def test_settings(config: ResolvedConfig, mode: TestMode, prepared: PreparedTest, log_dir: Path,
                  device_share: float = 1.0, probe_samples: int | None = None) -> tuple[Path, CoreSettings]:
    """What the C++ core runs one test of this config with: its user.conf, written into ``log_dir``, and the core's
    settings, whose QSL reports the samples that user.conf loads (``qsl_performance_sample_count``).
    ``device_share``: what is left to scale the config's rate by (``write_user_conf``)."""
    user_conf = write_user_conf(config, prepared.total_sample_count, log_dir, device_share=device_share,
                                probe_samples=probe_samples)
    loaded = qsl_performance_sample_count(config, prepared.performance_sample_count, device_share, probe_samples)
    settings = CoreSettings(model=loadgen_model(config), scenario=config.scenario.value, mode=mode.value,
                            user_conf=user_conf, log_dir=log_dir, total_sample_count=prepared.total_sample_count,
                            performance_sample_count=loaded, max_batch_size=config["gpu_batch_size"],
                            num_workers=config["num_workers"], sort_by_length=config["sort_by_length"],
                            batch_timeout_us=config.values.get("batch_timeout_us", 0), round=config["round"],
                            log_enable_trace=config["log_enable_trace"], token_responses=prepared.token_responses)
    return user_conf, settings


def progress_shape(config: ResolvedConfig, user_conf: Path) -> ProgressShape:
    bound_ns = SERVER_LATENCY_BOUND_NS.get(config.benchmark) if config.scenario is Scenario.Server else None
    return ProgressShape(config.scenario.value, min_duration_s(user_conf, config.scenario.value),
                         bound_ns / 1e9 if bound_ns else None)


def score_test01(evaluate_accuracy: Callable[[Path], AccuracyReport], log_dir: Path,
                 reference_accuracy_log: Path) -> dict[str, Any]:
    """Score TEST01's logged responses and the accuracy run's to the same samples (baseline/): the checker compares
    the two scores where the responses differ."""
    baseline_dir = log_dir / "baseline"
    baseline_dir.mkdir()
    write_baseline_log(reference_accuracy_log, log_dir / "mlperf_log_accuracy.json",
                       baseline_dir / "mlperf_log_accuracy.json")
    return {"audit": evaluate_accuracy(log_dir).as_dict(), "baseline": evaluate_accuracy(baseline_dir).as_dict()}


def main() -> int:
    if len(sys.argv) != 2:
        print("usage: python -m code.processes.run_single_test <test_spec.json>", file=sys.stderr)
        return 2
    die_with_parent()  # a test never runs on after the harness that started it is gone
    configure()  # the level the harness was started with (--verbose), through the environment
    spec_file = Path(sys.argv[1])
    spec = json.loads(spec_file.read_text())
    try:
        run_single_test(spec, spec_file)
    except Exception as error:
        message = describe(error, writing_in=Path(spec["log_dir"]))
        if message is None:
            raise  # a bug: its traceback is the report
        print(f"ERROR: {message}", file=sys.stderr, flush=True)  # the parent's summary quotes this line
        return ExitCode.TEST_FAILED
    return ExitCode.OK


if __name__ == "__main__":
    sys.exit(main())
