"""Rounds: the table agrees with each round's official checker, the pinned LoadGen has the round's seeds, and a
round is chosen by flag, config field or Make variable, with bad input refused by name."""

import importlib.util
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from code.common.constants import Scenario
from code.common.paths import REPO_ROOT
from code.common.rounds import (
    ROUNDS,
    RoundError,
    default_round,
    default_scenarios,
    get_round,
    newest_round,
    round_choice,
    rounds_taking,
)
from code.harness.fetch_loadgen import SOURCE_ENV_VAR, FetchError, fetch_loadgen, manifest, mlperf_conf_seeds
from code.mlperf.arguments import ArgumentError, parse_run_args
from tests.conftest import official_tools, round_core

OUR_BENCHMARKS = ("bert-99", "bert-99.9", "gptj-99", "gptj-99.9", "llama3.1-8b", "llama3.1-8b-edge")


def official_checker(round_name: str):  # noqa: ANN201 - the checker module
    """Import the round's checker as it is: submission_checker.py (it imports log_parser from its own folder), or,
    where the checker is a package (v6.1), its ``constants`` module (MODEL_CONFIG, the system description fields)."""
    folder = official_tools(round_name, "tools/submission")
    sys.path.insert(0, str(folder))
    try:
        if get_round(round_name).tools.checker[0] == "-m":
            return importlib.import_module("submission_checker.constants")
        spec = importlib.util.spec_from_file_location(f"checker_{round_name.replace('.', '_')}",
                                                      folder / "submission_checker.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(folder))
    return module


@pytest.mark.parametrize("round_name", list(ROUNDS))
def test_table_matches_the_official_checker(round_name):
    checker = official_checker(round_name).MODEL_CONFIG[round_name]
    ours = ROUNDS[round_name]
    for system_type in ("datacenter", "edge", "datacenter,edge"):
        theirs = checker[f"required-scenarios-{system_type.replace(',', '-')}"]
        for benchmark in OUR_BENCHMARKS:
            expected = sorted(theirs.get(benchmark, []))
            assert sorted(s.value for s in ours.scenarios.get(system_type, {}).get(benchmark, ())) == expected, (
                system_type, benchmark)
            # the optional scenarios the harness runs (it runs no Interactive scenario)
            optional = checker.get(f"optional-scenarios-{system_type.replace(',', '-')}", {}).get(benchmark, [])
            assert sorted(s.value for s in ours.optional.get(system_type, {}).get(benchmark, ())) == sorted(
                name for name in optional if name in {s.value for s in Scenario}), (system_type, benchmark)
    assert vars(ours.seeds) == checker["seeds"]


def test_v5_0_has_bert_only_on_edge():
    v5 = get_round("v5.0")
    assert v5.scenarios_for("datacenter", "bert-99") == ()
    refusal = v5.refusal("bert-99", Scenario.Server, "datacenter")
    assert refusal == ("round v5.0 has no bert-99 Server for datacenter systems: it has bert-99 for edge: Offline, "
                       "SingleStream; datacenter,edge: Offline, SingleStream (round v4.1 has it: --round=v4.1)")
    assert v5.refusal("gptj-99", Scenario.Server, "datacenter") is None


def test_bert_stays_edge_only_and_gptj_ends_with_v5_0():
    """From v5.1 the small LLM is llama3.1-8b: a GPT-J SubmissionRun for v5.1 is refused, naming the rounds that
    have it; BERT has Offline and SingleStream on edge systems in every round from v5.0."""
    for name in ("v5.1", "v6.1"):
        assert get_round(name).refusal("gptj-99", Scenario.Offline, "datacenter") == (
            f"round {name} has no gptj-99 Offline for datacenter systems: it has no gptj-99 (rounds v4.1, v5.0 have "
            "it: --round=v5.0)")
        assert get_round(name).scenarios_for("edge", "bert-99.9") == (Scenario.Offline, Scenario.SingleStream)


def test_the_newest_round_of_each_test():
    """GPT-J's newest round is v5.0; BERT's is v6.1 on edge, v4.1 for datacenter Server; no round has BERT
    SingleStream from a datacenter-only system."""
    assert newest_round("gptj-99", Scenario.Server, "datacenter") == "v5.0"
    assert newest_round("bert-99", Scenario.Offline, "edge") == "v6.1"
    assert newest_round("bert-99.9", Scenario.Server, "datacenter") == "v4.1"
    assert newest_round("bert-99", Scenario.SingleStream, "datacenter") is None
    assert round_choice("v5.0", "default", "bert-99", Scenario.Offline, "edge") == (
        "round v5.0 (default; the newest round that takes bert-99 Offline on edge systems is v6.1: --round=v6.1)")
    assert round_choice("v5.0", "RUN_ARGS", "gptj-99", Scenario.Offline, "edge") == (
        "round v5.0 (RUN_ARGS; the newest round that takes gptj-99 Offline on edge systems)")
    assert round_choice("v6.1", "RUN_ARGS", "bert-99", Scenario.Server, "datacenter") == (
        "round v6.1 (RUN_ARGS; the newest round that takes bert-99 Server on datacenter systems is v4.1: "
        "--round=v4.1 LOADGEN_SRC=<clone>)")


# Each test's default round over the real tables: (benchmark, scenario, system type) -> round. The newest round that
# accepts the test and builds from PyPI; v4.1 (a clone) never.
OFF, SRV, SS = Scenario.Offline, Scenario.Server, Scenario.SingleStream
DEFAULT_ROUNDS = [
    *[(bert, scenario, kind, "v6.1") for bert in ("bert-99", "bert-99.9") for scenario in (OFF, SS)
      for kind in ("edge", "datacenter,edge")],
    *[(gptj, scenario, kind, "v5.0") for gptj in ("gptj-99", "gptj-99.9")
      for scenario, kind in ((OFF, "datacenter"), (SRV, "datacenter"), (OFF, "edge"), (SS, "edge"),
                             (OFF, "datacenter,edge"), (SRV, "datacenter,edge"), (SS, "datacenter,edge"))],
    ("llama3.1-8b", OFF, "datacenter", "v6.1"), ("llama3.1-8b", OFF, "edge", "v6.1"),
    ("llama3.1-8b", SS, "edge", "v6.1"), ("llama3.1-8b", OFF, "datacenter,edge", "v6.1"),
]


@pytest.mark.parametrize(("benchmark", "scenario", "kind", "expected"), DEFAULT_ROUNDS)
def test_each_test_has_its_default_round(benchmark, scenario, kind, expected):
    assert default_round(benchmark, scenario, kind) == expected
    assert default_round(benchmark, scenario, kind, measuring=True) == expected
    assert scenario in get_round(expected).scenarios_for(kind, benchmark)
    assert get_round(expected).builds_from_release


@pytest.mark.parametrize(("benchmark", "scenario", "kind"), [
    ("bert-99", OFF, "datacenter"), ("bert-99", SRV, "datacenter"), ("bert-99.9", OFF, "datacenter"),
    ("bert-99.9", SRV, "datacenter"), ("bert-99", SRV, "datacenter,edge"), ("bert-99.9", SRV, "datacenter,edge")])
def test_a_test_only_the_clone_built_round_takes_names_the_clone(benchmark, scenario, kind):
    """BERT from datacenter systems is v4.1's alone, whose LoadGen is the user's clone: a SubmissionRun must name
    the round and the clone; a measurement runs with the newest buildable round that has BERT."""
    with pytest.raises(RoundError) as raised:
        default_round(benchmark, scenario, kind)
    assert f"{benchmark} {scenario.value} from {kind} systems is in round v4.1 only" in str(raised.value)
    assert "--round=v4.1 LOADGEN_SRC=<clone>" in str(raised.value)
    assert "make run ROUND=v4.1 LOADGEN_SRC=<clone>" in str(raised.value)
    assert default_round(benchmark, scenario, kind, measuring=True) == "v6.1"


def test_a_test_no_round_takes_measures_with_the_newest_that_has_the_benchmark():
    """BERT Server from an edge system, BERT SingleStream from a datacenter one, llama3.1-8b SingleStream from a
    datacenter,edge one (v5.1 and v6.1 run the datacenter set there): no checker takes them, so they can only
    measure, with the newest buildable round that has the benchmark (the verdict says they are not submittable). A
    system without a type takes any type's rounds."""
    assert newest_round("bert-99", SRV, "edge") is None
    assert default_round("bert-99", SRV, "edge") == "v6.1"
    assert default_round("bert-99", SS, "datacenter") == "v6.1"
    assert default_round("gptj-99", SS, "datacenter") == "v5.0"
    assert newest_round("llama3.1-8b", SS, "datacenter,edge") is None
    assert default_round("llama3.1-8b", SS, "datacenter,edge") == "v6.1"
    assert default_round("bert-99", OFF, None) == "v6.1"
    assert default_round("gptj-99", SRV, None) == "v5.0"


def test_llama_server_is_optional_from_v5_1():
    """llama3.1-8b's datacenter Server is optional in v5.1 and v6.1: both take it from datacenter and datacenter,edge
    systems, neither requires it (--scenarios=all runs Offline alone), and a staged set may hold it."""
    for name in ("v5.1", "v6.1"):
        round_ = get_round(name)
        for kind in ("datacenter", "datacenter,edge"):
            assert round_.refusal("llama3.1-8b", SRV, kind) is None
            assert SRV in round_.accepted_for(kind, "llama3.1-8b") and SRV not in round_.scenarios_for(
                kind, "llama3.1-8b")
        assert round_.refusal("llama3.1-8b", SRV, "edge") is not None
    for kind in ("datacenter", "datacenter,edge"):
        assert newest_round("llama3.1-8b", SRV, kind) == "v6.1"
        assert [r.name for r in rounds_taking("llama3.1-8b", SRV, kind)] == ["v5.1", "v6.1"]


def test_scenarios_all_without_a_round_is_one_rounds():
    """--scenarios=all with no round: the newest buildable round that has the benchmark on the system's type, and
    every scenario it requires there; BERT on a datacenter-only system is v4.1's, which names the clone."""
    assert default_scenarios("bert-99", "edge") == ("v6.1", (OFF, SS))
    assert default_scenarios("gptj-99", "datacenter,edge") == ("v5.0", (OFF, SRV, SS))
    assert default_scenarios("llama3.1-8b", "datacenter,edge") == ("v6.1", (OFF,))
    with pytest.raises(RoundError, match=r"bert-99 from datacenter systems is in round v4.1 only, .*"
                                         r"--round=v4.1 LOADGEN_SRC=<clone>"):
        default_scenarios("bert-99", "datacenter")


def test_the_clone_command_names_the_tag_or_the_commit(tmp_path):
    """A round judged by its tag's tools is cloned at the tag; v5.1 and v6.1, judged by the main branch's checker,
    at the commit that holds their rules."""
    assert get_round("v5.0").tools.clone_command(tmp_path) == (
        f"git clone --branch v5.0 https://github.com/mlcommons/inference {tmp_path / 'v5.0'}")
    for name in ("v5.1", "v6.1"):
        assert get_round(name).tools.clone_command(tmp_path) == (
            f"git clone https://github.com/mlcommons/inference {tmp_path / 'main'} && git -C {tmp_path / 'main'} "
            "checkout b66003e10e2db4b8c36a448b0545ec90fcc6e9e9")


def test_unknown_round_and_system_type_name_the_choices():
    with pytest.raises(RoundError, match=r"unknown round 'v6.0'; valid rounds: v4.1, v5.0, v5.1, v6.1"):
        get_round("v6.0")
    with pytest.raises(RoundError, match=r"unknown system_type 'cloud'; valid: datacenter, edge, datacenter,edge"):
        get_round("v5.0").scenarios_for("cloud", "bert-99")


def test_round_flag_field_and_errors():
    assert parse_run_args([]).overrides == {}
    assert parse_run_args(["--round=v4.1"]).overrides == {"round": "v4.1"}
    assert parse_run_args(["--round=v4.1", "--round=v4.1"]).overrides == {"round": "v4.1"}
    with pytest.raises(ArgumentError, match=r"valid choices: v4.1, v5.0, v5.1, v6.1"):
        parse_run_args(["--round=v6.0"])
    with pytest.raises(ArgumentError, match=r"--round is given twice \(v5.0 and v4.1\); give it once"):
        parse_run_args(["--round=v5.0", "--round=v4.1"])


def test_make_passes_round_once():
    """ROUND=... reaches both the build and the run; a different --round in RUN_ARGS is an error, not a choice."""
    done = subprocess.run(["make", "-n", "run", "ROUND=v4.1", "RUN_ARGS=--test_run"], cwd=REPO_ROOT,
                          capture_output=True, text=True, check=True)
    assert "code.harness.build --round=v4.1" in done.stdout
    assert "--action=run --round=v4.1 --test_run" in done.stdout
    done = subprocess.run(["make", "-n", "build", "RUN_ARGS=--round=v4.1 --test_run"], cwd=REPO_ROOT,
                          capture_output=True, text=True, check=True)
    assert "code.harness.build --round=v4.1" in done.stdout


def test_make_build_without_a_round_builds_the_rounds_of_the_runs_tests():
    """No ROUND, no --round: `make build` (and `make run` before it runs) builds the default round of each test the
    run resolves: BERT and GPT-J on the CPU system are v6.1's and v5.0's; llama3.1-8b's is v6.1."""
    from code.actions.build_cores import rounds_of_run

    done = subprocess.run(["make", "-n", "build", "RUN_ARGS=--benchmarks=bert,gptj --test_run"], cwd=REPO_ROOT,
                          capture_output=True, text=True, check=True)
    assert "-m code.actions.build_cores --benchmarks=bert,gptj --test_run" in done.stdout
    done = subprocess.run(["make", "-n", "run", "RUN_ARGS=--benchmarks=gptj --test_run"], cwd=REPO_ROOT,
                          capture_output=True, text=True, check=True)
    assert "-m code.actions.build_cores --action=run --benchmarks=gptj --test_run" in done.stdout
    cpu = ["--system_name=CPU", "--scenarios=offline"]
    assert rounds_of_run([*cpu, "--benchmarks=bert,gptj,llama3.1-8b"]) == ["v6.1", "v5.0"]
    assert rounds_of_run(["--system_name=CPU"]) == ["v6.1"]  # make run's default test: BERT Offline
    assert rounds_of_run([*cpu, "--benchmarks=bert", "--round=v5.0"]) == ["v5.0"]
    assert rounds_of_run(["--action=run_audit", *cpu, "--benchmarks=bert-99", "--audit_test=TEST01"]) == ["v6.1"]


def test_a_round_given_by_make_and_run_args_names_round():
    """ROUND= becomes --round before RUN_ARGS: the error names the make variable the user typed."""
    done = subprocess.run(["make", "--no-print-directory", "run", "ROUND=v5.0",
                           "RUN_ARGS=--benchmarks=bert --scenarios=offline --test_run --round=v4.1"], cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode != 0
    assert ("ERROR: --round is given twice (v5.0 and v4.1): make's ROUND=v5.0 passes --round=v5.0 along with "
            "RUN_ARGS; give it once, as ROUND= or as --round in RUN_ARGS") in done.stderr.splitlines()
    assert "Traceback" not in done.stderr and "code.harness.build" not in done.stdout  # refused before the build


def _fake_sdist(folder: Path, version: str, seed_lines: str) -> Path:
    """A tarball shaped like the mlcommons-loadgen sdist, with the given seeds in its mlperf.conf."""
    root = folder / f"mlcommons_loadgen-{version}"
    (root / "generated").mkdir(parents=True)
    for name in ("early_stopping.cc", "issue_query_controller.cc", "loadgen.cc", "logging.cc",
                 "test_settings_internal.cc", "utils.cc", "version.cc", "results.cc", "generated/version_generated.cc",
                 "loadgen.h", "query_sample.h", "query_sample_library.h", "system_under_test.h", "test_settings.h"):
        (root / name).write_text("// stand-in\n")
    (root / "mlperf.conf").write_text("# seeds\n" + seed_lines)
    tarball = folder / f"mlcommons_loadgen-{version}.tar.gz"
    with tarfile.open(tarball, "w:gz") as tar:
        tar.add(root, arcname=root.name)
    return tarball


def test_fetch_refuses_a_loadgen_with_another_rounds_seeds(tmp_path, monkeypatch):
    """The pin is checked where it matters: a LoadGen whose compiled-in seeds are not the round's never builds."""
    import hashlib
    from dataclasses import replace

    v50 = get_round("v5.0")
    wrong = "".join(f"*.*.{k} = {v}\n" for k, v in vars(get_round("v4.1").seeds).items())
    tarball = _fake_sdist(tmp_path / "wrong", v50.loadgen.version, wrong)
    digest = hashlib.sha256(tarball.read_bytes()).hexdigest()
    pinned = replace(v50, loadgen=replace(v50.loadgen, sha256=digest))
    monkeypatch.setenv("MLPERF_LOADGEN_SDIST", str(tarball))
    with pytest.raises(FetchError, match=r"round v5.0's checker expects .*the pin in code/common/rounds.py is wrong"):
        fetch_loadgen(pinned, tmp_path / "build")

    right = "".join(f"*.*.{k} = {v}\n" for k, v in vars(v50.seeds).items())
    tarball = _fake_sdist(tmp_path / "right", v50.loadgen.version, right)
    digest = hashlib.sha256(tarball.read_bytes()).hexdigest()
    pinned = replace(v50, loadgen=replace(v50.loadgen, sha256=digest))
    monkeypatch.setenv("MLPERF_LOADGEN_SDIST", str(tarball))
    source = fetch_loadgen(pinned, tmp_path / "build")
    assert source == tmp_path / "build" / "mlcommons_loadgen-5.0.13" and (source / "mlperf_conf.h").is_file()


def test_after_make_clean_the_sources_come_back_from_the_downloads_without_network(tmp_path, monkeypatch):
    """make clean deletes build/harness/ (the extracted sources) and keeps build/downloads/ (the sdist): a machine
    without network extracts them again. An sdist an earlier build kept in build/harness/<round>/ moves there."""
    import hashlib
    from dataclasses import replace

    from code.harness import fetch_loadgen as fetch

    v50 = get_round("v5.0")
    tarball = _fake_sdist(tmp_path / "made", v50.loadgen.version,
                          "".join(f"*.*.{k} = {v}\n" for k, v in vars(v50.seeds).items()))
    pinned = replace(v50, loadgen=replace(v50.loadgen, sha256=hashlib.sha256(tarball.read_bytes()).hexdigest()))
    monkeypatch.delenv("MLPERF_LOADGEN_SDIST", raising=False)

    def no_network(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202 - what unshare -n leaves a download
        raise OSError("network is unreachable")

    monkeypatch.setattr(fetch, "download", no_network)
    build, downloads = tmp_path / "build" / "harness" / "v5.0", tmp_path / "build" / "downloads"
    build.mkdir(parents=True)
    tarball.rename(build / tarball.name)  # where a build before build/downloads/ kept it
    source = fetch_loadgen(pinned, build, downloads)
    assert (downloads / tarball.name).is_file() and not (build / tarball.name).exists()
    shutil.rmtree(build)  # make clean
    assert fetch_loadgen(pinned, build, downloads) == source and (source / "mlperf_conf.h").is_file()
    (downloads / tarball.name).unlink()  # make clean_all: the download goes too, and is named
    shutil.rmtree(build)
    with pytest.raises(FetchError, match=r"could not download mlcommons_loadgen-5.0.13.tar.gz: network is "
                                         r"unreachable.*set MLPERF_LOADGEN_SDIST="):
        fetch_loadgen(pinned, build, downloads)


def test_a_source_built_round_names_the_clone_it_needs(tmp_path, monkeypatch):
    """v4.1's LoadGen comes from the user's clone of mlcommons/inference at tag v4.1: none named, or a folder that
    is not one, is an error that says how to get it."""
    monkeypatch.delenv(SOURCE_ENV_VAR, raising=False)
    with pytest.raises(FetchError, match=r"round v4.1 builds LoadGen from mlcommons/inference at tag v4.1 .*`git clone "
                                         r"--branch v4.1 https://github.com/mlcommons/inference <folder>`, then set "
                                         r"LOADGEN_SRC=<folder> \(make build ROUND=v4.1 LOADGEN_SRC=<folder>\)"):
        fetch_loadgen(get_round("v4.1"), tmp_path / "build")
    monkeypatch.setenv(SOURCE_ENV_VAR, str(tmp_path))
    with pytest.raises(FetchError, match=r"is not a clone of mlcommons/inference \(no loadgen/loadgen.h in it\)"):
        fetch_loadgen(get_round("v4.1"), tmp_path / "build")


def test_a_clone_with_changed_loadgen_files_is_refused(tmp_path, monkeypatch):
    """Every file the build uses must be the tag's: a changed one is named, with the checkout that fixes it."""
    import shutil

    clone = os.environ.get(SOURCE_ENV_VAR)
    if not clone:
        pytest.skip(f"{SOURCE_ENV_VAR} names no clone of mlcommons/inference at tag v4.1 here")
    v41 = get_round("v4.1")
    root = Path(clone).resolve()
    root = root.parent if root.name == "loadgen" else root
    copy = tmp_path / "inference"
    for path in manifest(v41.loadgen):
        (copy / path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(root / path, copy / path)
    with open(copy / "loadgen" / "results.cc", "a") as changed:
        changed.write("// a local change\n")
    monkeypatch.setenv(SOURCE_ENV_VAR, str(copy / "loadgen"))  # the loadgen/ folder is accepted for the clone
    with pytest.raises(FetchError, match=r"is not mlcommons/inference at tag v4.1 \(commit 379ee5345a\): "
                                         r"loadgen/results.cc differ .*`git -C .* checkout v4.1`"):
        fetch_loadgen(v41, tmp_path / "build")


def test_fetch_names_the_rounds_sdist_for_a_wrong_local_copy(tmp_path, monkeypatch):
    other = tmp_path / "other.tar.gz"
    other.write_bytes(b"not loadgen")
    monkeypatch.setenv("MLPERF_LOADGEN_SDIST", str(other))
    with pytest.raises(FetchError, match=r"is not the mlcommons_loadgen-5.0.13.tar.gz round v5.0 needs"):
        fetch_loadgen(get_round("v5.0"), tmp_path / "build")


def test_seed_parser_reads_the_rounds_own_lines():
    conf = ("*.*.qsl_rng_seed = 1\n*.*.sample_index_rng_seed = 2\n*.*.schedule_rng_seed = 3\n"
            "*.*.test05_qsl_rng_seed = 9\n")
    assert vars(mlperf_conf_seeds(conf)) == {"qsl_rng_seed": 1, "sample_index_rng_seed": 2, "schedule_rng_seed": 3}


@pytest.mark.slow
@pytest.mark.parametrize("round_name", list(ROUNDS))
def test_each_rounds_build_has_its_loadgen_and_seeds(round_name, harness_built):
    """Builds live side by side: building one round leaves the other's module untouched; each compiles in the
    pinned LoadGen, whose mlperf.conf carries the seeds the round's checker expects."""
    others = {name: round_core(name) for name in ROUNDS if name != round_name}
    before = {name: path.stat().st_mtime_ns for name, path in others.items()}
    built = round_core(round_name)
    assert {name: path.stat().st_mtime_ns for name, path in others.items()} == before
    assert built.parent.name == round_name
    code = f"from code.harness.core import loadgen_version; print(loadgen_version('{round_name}'))"
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ROUNDS[round_name].loadgen.version
    conf = fetch_loadgen(ROUNDS[round_name]) / "mlperf.conf"
    assert mlperf_conf_seeds(conf.read_text()) == ROUNDS[round_name].seeds


@pytest.mark.parametrize("round_name", sorted(ROUNDS))
def test_server_latency_bounds_are_the_rounds(round_name):
    """code.common.constants.SERVER_LATENCY_BOUND_NS is the one statement of the Server bound in our code: it must be
    what each round's mlperf.conf sets (when that round's LoadGen is fetched), and the bench's profiles read it."""
    import re

    from code.common.constants import SERVER_LATENCY_BOUND_NS, Benchmark
    from code.harness.fetch_loadgen import source_dir
    from scripts.bench import settings

    for family, profile in settings.PROFILES.items():
        assert profile.server_latency_bound_ms * 1_000_000 == SERVER_LATENCY_BOUND_NS[Benchmark(family)]
    conf = source_dir(get_round(round_name)) / "mlperf.conf"
    if not conf.is_file():
        pytest.skip(f"round {round_name}'s LoadGen is not fetched")
    text = conf.read_text(encoding="utf-8")
    for benchmark, bound_ns in SERVER_LATENCY_BOUND_NS.items():
        match = re.search(rf"^{benchmark.value}\.Server\.target_latency\s*=\s*(\d+)", text, re.MULTILINE)
        assert match and int(match.group(1)) * 1_000_000 == bound_ns, (round_name, benchmark)


@pytest.mark.parametrize("round_name", sorted(ROUNDS))
def test_an_edge_set_has_its_key_where_the_round_has_the_set(round_name):
    """An edge run passes its set's own mlperf.conf key (code/config/resolve.py's ``loadgen_model``), so a round
    names an edge set only where its LoadGen's mlperf.conf has that key (v5.1's 5.1.2, v6.1's 6.0.17: 5,000 samples
    where llama3_1-8b has 13,368), and its checker maps the key to its edge name and counts the set's samples; a
    round without the key (v5.0) names none, so its runs keep the benchmark's key."""
    import re

    from code.common.constants import EDGE_SETS, Benchmark
    from code.harness.fetch_loadgen import source_dir

    the_round = get_round(round_name)
    named = {Benchmark.parse(ours)[0]: theirs for ours, theirs in the_round.edge_names.items()}
    assert set(named) <= set(EDGE_SETS)
    if named:
        checker = official_checker(round_name).MODEL_CONFIG[round_name]
        for benchmark, theirs in named.items():
            edge = EDGE_SETS[benchmark]
            assert checker["model_mapping"][edge.loadgen_model] == theirs
            assert checker["performance-sample-count"][theirs] == checker["dataset-size"][theirs] == edge.size
    conf = source_dir(the_round) / "mlperf.conf"
    if not conf.is_file():
        pytest.skip(f"round {round_name}'s LoadGen is not fetched")
    text = conf.read_text(encoding="utf-8")
    for benchmark, edge in EDGE_SETS.items():
        key = re.escape(edge.loadgen_model)
        counts = [re.search(rf"^{key}\.{where}\s*=\s*(\d+)\s*$", text, re.MULTILINE)
                  for where in (r"\*\.performance_sample_count_override", r"Offline\.min_query_count")]
        if benchmark in named:
            assert [int(match.group(1)) if match else None for match in counts] == [edge.size] * 2, round_name
        else:
            assert counts == [None, None] and not re.search(rf"^{key}\.", text, re.MULTILINE), round_name


def test_llama_has_the_checkers_name_of_each_system_type():
    """v5.1 and v6.1 (the main branch's checker) check an edge system's llama3.1-8b (the 5,000-sample edge set) as
    llama3.1-8b-edge, which needs no audit, and a datacenter one's with TEST06. A run keeps the name llama3.1-8b."""
    for name in ("v5.1", "v6.1"):
        the_round = get_round(name)
        assert the_round.checker_name("llama3.1-8b", "edge") == "llama3.1-8b-edge"
        assert the_round.checker_name("llama3.1-8b", "datacenter,edge") == "llama3.1-8b"
        assert the_round.scenarios_for("edge", "llama3.1-8b") == (Scenario.Offline, Scenario.SingleStream)
        assert the_round.audits_for("llama3.1-8b", "edge") == ()
        assert the_round.scenarios_for("datacenter", "llama3.1-8b") == (Scenario.Offline,)
        assert the_round.audits_for("llama3.1-8b") == ("TEST06",)
    assert newest_round("llama3.1-8b", Scenario.SingleStream, "edge") == "v6.1"


def test_a_checker_name_maps_back_to_the_benchmark_a_run_takes():
    """Commands name our benchmarks: llama3.1-8b-edge is run as llama3.1-8b; other names are the same."""
    for name in ("v5.1", "v6.1"):
        assert ROUNDS[name].run_name("llama3.1-8b-edge") == "llama3.1-8b"
        assert ROUNDS[name].run_name("bert-99") == "bert-99"


def test_a_run_builds_a_missing_core_of_its_tests_round_first(tmp_path, monkeypatch):
    """A test's default round may not be built yet (`python -m code.main`, or a run whose tests changed): the run
    builds it before any test starts; a round it cannot build stops the run with the build's fix."""
    from code.common.benchmark_errors import BenchmarkError
    from code.harness.build import BuildError
    from code.processes import test_process

    built: list[str] = []
    monkeypatch.setattr(test_process, "harness_lib_dir", lambda round_name: tmp_path / round_name)
    monkeypatch.setattr(test_process, "build", lambda round_name: built.append(round_name))
    test_process.require_built_core("v6.1")
    assert built == ["v6.1"]

    def no_clone(round_name):  # noqa: ANN001, ANN202 - stands in for the build of a clone-built round
        raise BuildError("cannot get the LoadGen sources: give LOADGEN_SRC=<clone>")

    monkeypatch.setattr(test_process, "build", no_clone)
    with pytest.raises(BenchmarkError, match=r"the C\+\+ core of round v4.1 is not built, and building it failed: "
                                             r"cannot get the LoadGen sources: give LOADGEN_SRC=<clone>; fix that, "
                                             r"then run `make build ROUND=v4.1`"):
        test_process.require_built_core("v4.1")
