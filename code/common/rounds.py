"""MLPerf Inference rounds: which LoadGen each needs and which benchmarks and scenarios each accepts.

A round's submission checker compares the RNG seeds in every performance log with its own, and a round's
compliance scripts read lines of LoadGen's summary by their wording, so a round pins the LoadGen whose logs its own
unmodified tools accept: a release on PyPI (its sdist, seeds compiled in from its ``mlperf.conf``), or, where no
release will do, the round's tag of mlcommons/inference, which the user clones (v4.1: every 4.1.x release reads
``audit.config`` as a second user configuration, so no audit can pass; the tag's LoadGen reads ``mlperf.conf`` at
run time, and ``audit.config`` as an audit). tests/common/test_loadgen_pins.py runs each pin against the round's
tools. The scenario tables are those of each round's official checker (``MODEL_CONFIG``, its required scenarios
per system type), for the benchmarks this harness runs, and so are the compliance audits it requires of each
benchmark (its ``check_compliance_dir``, or in the main branch's package its ``models_TEST*`` lists);
tests/common/test_rounds.py and tests/common/test_audits.py compare them with the checker itself. Each round also
names where its official tools sit (``OfficialTools``): a clone of mlcommons/inference at the round's tag, or at the
commit of the main branch that holds its rules, for a round with no tag yet (v6.1) and for one whose tag's checker
cannot judge what its own LoadGen logs (v5.1, below). Adding a round is one entry in ``ROUNDS``.

No round is the default of every run: a test that names none is for ``default_round`` of its benchmark, scenario
and system type, the newest round that accepts it and whose LoadGen builds from PyPI (documentation/rounds.md).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from code.common.constants import Scenario

# The system types a systems/<system>.json may declare, as the checker spells them.
SYSTEM_TYPES = ("datacenter", "edge", "datacenter,edge")


class RoundError(ValueError):
    """A round that does not exist, or that does not accept what a run asks for; the message names the fix."""


PYPI_FILES = "https://files.pythonhosted.org/packages"


@dataclass(frozen=True)
class LoadgenRelease:
    """The mlcommons-loadgen sdist on PyPI a round builds from (its sha256 pinned: a changed file never builds)."""

    version: str
    sha256: str
    pypi_path: str  # the file's folder under PYPI_FILES (PyPI's digest path, not derivable from the version)

    @property
    def sdist_name(self) -> str:
        return f"mlcommons_loadgen-{self.version}.tar.gz"

    @property
    def url(self) -> str:
        """Where PyPI serves the sdist: its folder, then the file name the version gives."""
        return f"{PYPI_FILES}/{self.pypi_path}/{self.sdist_name}"

    @property
    def conf_at_run_time(self) -> bool:
        """False: a release compiles its mlperf.conf in, and a second configuration file invalidates a run."""
        return False


@dataclass(frozen=True)
class LoadgenSource:
    """LoadGen built from a clone of mlcommons/inference at a round's tag, which the user provides (``LOADGEN_SRC``;
    it is never downloaded nor committed here). Its files are checked against ``manifest`` (sha256 of every LoadGen
    file the build compiles, its version generator and the tree's ``mlperf.conf``, as at the tag), so a tree at
    another commit or with local changes never builds."""

    tag: str
    commit: str
    version: str  # what the tree's version generator compiles in (LoadgenVersion())
    manifest: str  # file name under code/harness/loadgen_sources/ (sha256sum format, paths from the clone's root)

    @property
    def conf_at_run_time(self) -> bool:
        """True: this LoadGen does not compile mlperf.conf in; the harness reads the tree's before user.conf."""
        return True


@dataclass(frozen=True)
class RngSeeds:
    """The seeds the round's checker expects in ``effective_*_rng_seed`` (mlperf.conf's ``*.*.*_rng_seed``)."""

    qsl_rng_seed: int
    sample_index_rng_seed: int
    schedule_rng_seed: int


CLONE_URL = "https://github.com/mlcommons/inference"  # where every round's tools and tagged LoadGen come from


@dataclass(frozen=True)
class OfficialTools:
    """Where the round's unmodified tools sit in a clone of mlcommons/inference, and how to get that clone.

    At the tags up to v5.1 the checker is ``tools/submission/submission_checker.py`` and the audits are under
    ``compliance/nvidia/``; the main branch made the checker a package (``tools/submission/submission_checker/``, run
    as ``-m submission_checker.main``, which takes ``--version`` v5.0 to v6.1, each with its own tables and tree
    layout) and moved the audits to ``compliance/``. A round judged by the main branch is pinned to the commit whose
    rules it was built against."""

    folder: str  # the clone's folder under MLPERF_INFERENCE_TOOLS
    ref: str  # the tag to clone, or the commit to check out
    compliance: str = "compliance/nvidia"  # the folder of TEST01/, TEST04/, ... in the clone
    checker: tuple[str, ...] = ("submission_checker.py",)  # what python runs in tools/submission/

    @property
    def is_tag(self) -> bool:
        return not re.fullmatch(r"[0-9a-f]{40}", self.ref)

    def clone_command(self, root: Path) -> str:
        """The shell command that puts the round's tools where the harness looks for them."""
        where = root / self.folder
        if self.is_tag:
            return f"git clone --branch {self.ref} {CLONE_URL} {where}"
        return f"git clone {CLONE_URL} {where} && git -C {where} checkout {self.ref}"


@dataclass(frozen=True)
class TreeLayout:
    """Where the round's checker looks, in ``closed/<submitter>/``, for what staging writes beside ``results/``
    (its ``submission_structure.md``). Up to v5.1: ``measurements/<system>/<benchmark>/<Scenario>/`` (user.conf,
    README.md, ``<system>_<implementation>_<Scenario>.json``), ``compliance/<system>/<benchmark>/<Scenario>/<TEST>/``
    and ``code/``. From v6.0 the first two sit in the results' own scenario folder (the model information named
    ``measurements.json``) and the source folder is ``src/``."""

    measurements: str = "measurements"
    compliance: str = "compliance"
    source: str = "code"
    model_info: str = "{system}_{implementation}_{scenario}.json"

    def measurements_dir(self, system: str, benchmark: str, scenario: str) -> Path:
        return Path(self.measurements, system, benchmark, scenario)

    def audit_dir(self, system: str, benchmark: str, scenario: str, test: str) -> Path:
        return Path(self.compliance, system, benchmark, scenario, test)


# The results' scenario folder holds the measurements and the audits; src/ holds the code (v6.0 and later).
SCENARIO_FOLDER_LAYOUT = TreeLayout(measurements="results", compliance="results", source="src",
                                    model_info="measurements.json")


ScenarioTable = dict[str, dict[str, tuple[Scenario, ...]]]  # system type -> benchmark name -> scenarios
AuditTable = dict[str, tuple[str, ...]]  # benchmark name -> the compliance tests (TEST01, ...) a closed result needs


@dataclass(frozen=True)
class Round:
    """One submission round: its LoadGen, its seeds, and what its checker accepts from our benchmarks."""

    name: str
    loadgen: LoadgenRelease | LoadgenSource
    seeds: RngSeeds
    scenarios: ScenarioTable  # what a submission of the benchmark must hold
    audits: AuditTable
    tools: OfficialTools
    # Whether staging writes documentation/calibration.md for every closed submission, quantized or not: the v5.1
    # tag's checker requires it. The main branch's checker, which judges v5.1 and v6.1, takes
    # --skip-calibration-check but reads no such file; the file is written for both so a tree passes either checker.
    calibration_doc_required: bool = False
    layout: TreeLayout = TreeLayout()
    # The checker's own name of a benchmark on an edge system where it differs (v5.1 and v6.1 check llama3.1-8b's
    # 5,000-sample edge set as llama3.1-8b-edge): the tables and a staged tree use it; runs and their logs keep ours.
    edge_names: dict[str, str] = field(default_factory=dict)
    # What the checker takes beside the required scenarios when a submission holds them (its "optional-scenarios":
    # llama3.1-8b's datacenter Server): a result of its own, required of no one.
    optional: ScenarioTable = field(default_factory=dict)

    def checker_name(self, benchmark_name: str, system_type: str) -> str:
        """The name the round's checker gives ``benchmark_name`` on a system of this type."""
        return self.edge_names.get(benchmark_name, benchmark_name) if system_type == "edge" else benchmark_name

    def run_name(self, checker_name: str) -> str:
        """Our benchmark name for one of the checker's (llama3.1-8b-edge -> llama3.1-8b), for commands."""
        return next((ours for ours, theirs in self.edge_names.items() if theirs == checker_name), checker_name)

    @property
    def builds_from_release(self) -> bool:
        """Whether the round's LoadGen comes from PyPI, so any machine builds it; a clone-built one (v4.1) needs the
        user's clone (``LOADGEN_SRC``), and is used only when a run names it."""
        return isinstance(self.loadgen, LoadgenRelease)

    def scenarios_for(self, system_type: str, benchmark_name: str) -> tuple[Scenario, ...]:
        """The scenarios the round requires of ``benchmark_name`` (bert-99, ...) on a system type; () if none."""
        if system_type not in SYSTEM_TYPES:
            raise RoundError(f"unknown system_type '{system_type}'; valid: {', '.join(SYSTEM_TYPES)} (set it in "
                             "systems/<system>.json)")
        return self.scenarios.get(system_type, {}).get(self.checker_name(benchmark_name, system_type), ())

    def accepted_for(self, system_type: str, benchmark_name: str) -> tuple[Scenario, ...]:
        """The scenarios the round's checker takes of ``benchmark_name`` on a system type: the required ones, then
        the optional ones."""
        optional = self.optional.get(system_type, {}).get(self.checker_name(benchmark_name, system_type), ())
        return self.scenarios_for(system_type, benchmark_name) + optional

    def audits_for(self, benchmark_name: str, system_type: str = "datacenter") -> tuple[str, ...]:
        """The compliance tests the round's checker requires of ``benchmark_name`` in every scenario; () if none."""
        return self.audits.get(self.checker_name(benchmark_name, system_type), ())

    def refusal(self, benchmark_name: str, scenario: Scenario, system_type: str) -> str | None:
        """Why this round does not accept the test, naming what it does accept; None when it does."""
        if scenario in self.accepted_for(system_type, benchmark_name):
            return None
        offered = [f"{kind}: {', '.join(s.value for s in self.accepted_for(kind, benchmark_name))}"
                   for kind in self.scenarios if self.accepted_for(kind, benchmark_name)]
        has = f"it has {benchmark_name} for " + "; ".join(offered) if offered else f"it has no {benchmark_name}"
        elsewhere = [other.name for other in ROUNDS.values()
                     if other is not self and scenario in other.accepted_for(system_type, benchmark_name)]
        rounds_have = f"rounds {', '.join(elsewhere)} have" if len(elsewhere) > 1 else f"round {''.join(elsewhere)} has"
        hint = f" ({rounds_have} it: --round={elsewhere[-1]})" if elsewhere else ""  # the newest of them
        return (f"round {self.name} has no {benchmark_name} {scenario.value} for {system_type} systems: "
                f"{has}{hint}")


def _same_for(benchmarks: tuple[str, ...], scenarios: tuple[Scenario, ...]) -> dict[str, tuple[Scenario, ...]]:
    return {name: scenarios for name in benchmarks}


BERT = ("bert-99", "bert-99.9")
GPTJ = ("gptj-99", "gptj-99.9")
LLAMA = "llama3.1-8b"
LLAMA_EDGE = "llama3.1-8b-edge"  # the main branch checker's name of the 5,000-sample edge set (v5.1, v6.1)
# The commit of mlcommons/inference's main branch whose checker package judges v5.1 and v6.1.
MAIN_BRANCH_TOOLS = OfficialTools(folder="main", ref="b66003e10e2db4b8c36a448b0545ec90fcc6e9e9",
                                  compliance="compliance", checker=("-m", "submission_checker.main"))
OFFLINE_SERVER = (Scenario.Offline, Scenario.Server)
OFFLINE_SINGLESTREAM = (Scenario.Offline, Scenario.SingleStream)
ALL_THREE = (Scenario.Offline, Scenario.Server, Scenario.SingleStream)
# The main branch's checker takes llama3.1-8b's datacenter Server (and Interactive) as optional in v5.1 and v6.1.
LLAMA_SERVER_OPTIONAL: ScenarioTable = {kind: {LLAMA: (Scenario.Server,)} for kind in ("datacenter", "datacenter,edge")}

ROUNDS: dict[str, Round] = {
    "v4.1": Round(
        name="v4.1",
        # The round's tag: its LoadGen reads mlperf.conf at run time and audit.config as an audit (TEST01 samples
        # responses, TEST05 changes the seeds). Every 4.1.x on PyPI reads audit.config as a second user
        # configuration instead, so no v4.1 audit passes with them (documentation/rounds.md).
        loadgen=LoadgenSource(
            tag="v4.1",
            commit="379ee5345a25ee123fd5faec33285b6e8be0dadf",
            version="4.1",
            manifest="v4.1.sha256",
        ),
        seeds=RngSeeds(3066443479025735752, 10688027786191513374, 14962580496156340209),
        scenarios={
            "datacenter": {**_same_for(BERT, OFFLINE_SERVER), **_same_for(GPTJ, OFFLINE_SERVER)},
            "edge": {"bert-99": OFFLINE_SINGLESTREAM, **_same_for(GPTJ, OFFLINE_SINGLESTREAM)},
            "datacenter,edge": {"bert-99": ALL_THREE, "bert-99.9": OFFLINE_SERVER, **_same_for(GPTJ, ALL_THREE)},
        },
        # GPT-J needs no audit; TEST04 is not required of BERT.
        audits={name: ("TEST01", "TEST05") for name in BERT},
        tools=OfficialTools(folder="v4.1", ref="v4.1"),
    ),
    "v5.0": Round(
        name="v5.0",
        # The LoadGen of the round's v5.0.1 tag: v5.0's seeds, and its summary writes "Early stopping 90th
        # percentile estimate", the line the round's TEST01 verify_performance.py reads (5.0.15 and later write
        # "90.0th", which it does not read). tests/common/test_loadgen_pins.py checks both with the round's tools.
        loadgen=LoadgenRelease(
            version="5.0.13",
            sha256="c58c0877d3d13908aa746f568063746120e7575dae0e05feadee627b712f6ea3",
            pypi_path="6c/8a/0069ddea1e0705ee6428a487d02275fb1366097f7342992300325d5e1e2b",
        ),
        seeds=RngSeeds(6023615788873153749, 15036839855038426416, 9933818062894767841),
        # BERT is edge-only from v5.0.
        scenarios={
            "datacenter": _same_for(GPTJ, OFFLINE_SERVER),
            "edge": {**_same_for(BERT, OFFLINE_SINGLESTREAM), **_same_for(GPTJ, OFFLINE_SINGLESTREAM)},
            "datacenter,edge": {**_same_for(BERT, OFFLINE_SINGLESTREAM), **_same_for(GPTJ, ALL_THREE)},
        },
        # TEST05 ended with v4.1.
        audits={name: ("TEST01",) for name in BERT},
        tools=OfficialTools(folder="v5.0", ref="v5.0"),
    ),
    "v5.1": Round(
        name="v5.1",
        # The newest 5.1.x. Every release from 5.0.22 to 6.0.4 carries v5.1's seeds; all of them write "90.0th",
        # which the round's TEST04 reads, and its TEST01 reads the detail log's early_stopping_latency_ss.
        loadgen=LoadgenRelease(
            version="5.1.2",
            sha256="cd686a6223c978d1056e38a417e4807bfa21c855189f7882d24c8313174bca74",
            pypi_path="ab/09/e9da133330792bac27bdb1c41caa81626f7fe96b19548a9c88694ebac074",
        ),
        seeds=RngSeeds(1780908523862526354, 14771362308971278857, 18209322760996052031),
        # GPT-J left after v5.0; llama3.1-8b took its place: the datacenter set (13,368 samples) as llama3.1-8b,
        # the edge set (5,000) as llama3.1-8b-edge, as in v6.1; its datacenter Server is optional (the harness runs no
        # Interactive scenario). BERT stays edge-only. TEST06 is required of llama3.1-8b only, none of -edge.
        scenarios={"datacenter": {LLAMA: (Scenario.Offline,)},
                   "edge": {**_same_for(BERT, OFFLINE_SINGLESTREAM), LLAMA_EDGE: OFFLINE_SINGLESTREAM},
                   "datacenter,edge": {**_same_for(BERT, OFFLINE_SINGLESTREAM), LLAMA: (Scenario.Offline,),
                                       LLAMA_EDGE: OFFLINE_SINGLESTREAM}},
        optional=LLAMA_SERVER_OPTIONAL,
        audits={**{name: ("TEST01",) for name in BERT}, LLAMA: ("TEST06",)},
        edge_names={LLAMA: LLAMA_EDGE},
        # The main branch's checker with --version v5.1, not the v5.1 tag's: the tag's reads llama3.1-8b Offline's
        # figure from result_inferred_tokens_per_second, which LoadGen logs only with infer_token_latencies, as
        # samples per second times a fixed token_latency_scaling_factor (mlperf.conf sets both for GPT-J alone), so
        # it fails on every llama3.1-8b log whose tokens are counted. The main branch's v5.1 tables read
        # result_tokens_per_second and add llama3.1-8b-edge, which 5.1.2's mlperf.conf knows too; its v5.1 tree
        # layout is the tag's (measurements/, compliance/, code/).
        tools=MAIN_BRANCH_TOOLS,
        calibration_doc_required=True,
    ),
    "v6.1": Round(
        name="v6.1",
        # The LoadGen the checker's main branch names (6.0.16 and 6.0.17 carry v6.1's seeds; 6.0.5 to 6.0.15
        # v6.0's). Its summary and detail log word the scores as 5.1.x's do.
        loadgen=LoadgenRelease(
            version="6.0.17",
            sha256="a2e85d09e3cc0c606f89bfe1fbf97537c8b5b238ae0afbd923ad9c710fcf2ca8",
            pypi_path="a5/bf/f48063c9cada7fab76044acfa7b424a9cec2a13878c64c8c4532bca4572b",
        ),
        seeds=RngSeeds(2085463073848966840, 2747215439041700203, 16159082839903944936),
        # llama3.1-8b-edge (the edge set) needs no audit; llama3.1-8b (datacenter) TEST06. A datacenter,edge system
        # runs the datacenter set here, so its llama3.1-8b-edge is not offered.
        scenarios={"datacenter": {LLAMA: (Scenario.Offline,)},
                   "edge": {**_same_for(BERT, OFFLINE_SINGLESTREAM), LLAMA_EDGE: OFFLINE_SINGLESTREAM},
                   "datacenter,edge": {**_same_for(BERT, OFFLINE_SINGLESTREAM), LLAMA: (Scenario.Offline,),
                                       LLAMA_EDGE: OFFLINE_SINGLESTREAM}},
        optional=LLAMA_SERVER_OPTIONAL,
        audits={**{name: ("TEST01",) for name in BERT}, LLAMA: ("TEST06",)},
        edge_names={LLAMA: LLAMA_EDGE},
        # No v6.1 tag yet: the main branch's commit whose checker holds v6.0's and v6.1's rules.
        tools=MAIN_BRANCH_TOOLS,
        calibration_doc_required=True,
        layout=SCENARIO_FOLDER_LAYOUT,
    ),
}


def rounds_taking(benchmark_name: str, scenario: Scenario, system_type: str | None) -> list[Round]:
    """The rounds whose checker takes ``benchmark_name`` in ``scenario`` from a system of this type, oldest first;
    with no known type (``None``: a system without a description), those that take it from any type."""
    kinds = SYSTEM_TYPES if system_type is None else (system_type,)
    return [round_ for round_ in ROUNDS.values()
            if any(scenario in round_.accepted_for(kind, benchmark_name) for kind in kinds)]


def newest_round(benchmark_name: str, scenario: Scenario, system_type: str) -> str | None:
    """The newest round whose checker takes ``benchmark_name`` in ``scenario`` from a system of this type (ROUNDS is
    oldest first), a clone-built one included; None when no round does."""
    having = rounds_taking(benchmark_name, scenario, system_type)
    return having[-1].name if having else None


def default_round(benchmark_name: str, scenario: Scenario, system_type: str | None, measuring: bool = False) -> str:
    """The round of a test whose run names none: the newest round that accepts it and whose LoadGen builds from PyPI,
    so a run on a fresh machine counts for the newest round it can.

    A round built from the user's clone (v4.1) is used only when named. A test only such a round accepts (BERT
    Server from a datacenter system) raises, naming ``--round`` and ``LOADGEN_SRC``, unless ``measuring`` (a
    PerformanceOnly or AccuracyOnly run, which no checker judges): that, and a test no round accepts (BERT Server
    from an edge system), runs with the newest buildable round that has the benchmark at all, and its verdict says
    it is not submittable. ``system_type`` None (a system without a description): any type's rounds."""
    taking = rounds_taking(benchmark_name, scenario, system_type)
    buildable = [round_ for round_ in taking if round_.builds_from_release]
    if buildable:
        return buildable[-1].name
    if taking and not measuring:
        named = taking[-1]
        where = "systems of any type" if system_type is None else f"{system_type} systems"
        raise RoundError(
            f"{benchmark_name} {scenario.value} from {where} is in round {named.name} only, whose LoadGen is built "
            f"from your clone of {CLONE_URL} at its tag: name both, --round={named.name} LOADGEN_SRC=<clone> (make "
            f"run ROUND={named.name} LOADGEN_SRC=<clone> RUN_ARGS=\"...\"; documentation/rounds.md)")
    return _newest_with(benchmark_name)


def _newest_with(benchmark_name: str) -> str:
    """The newest buildable round that has ``benchmark_name`` on some system type: where a measurement of a test no
    buildable round accepts runs."""
    having = [round_.name for round_ in ROUNDS.values() if round_.builds_from_release
              and any(round_.checker_name(benchmark_name, kind) in by_bench
                      for kind, by_bench in round_.scenarios.items())]
    if not having:
        raise RoundError(f"no round has {benchmark_name}: valid rounds: {', '.join(ROUNDS)} (--round=...)")
    return having[-1]


def default_scenarios(benchmark_name: str, system_type: str) -> tuple[str, tuple[Scenario, ...]]:
    """``--scenarios=all`` with no round named: the newest buildable round that accepts any scenario of
    ``benchmark_name`` from this system type, and those scenarios; each is then that round's test by
    ``default_round`` as well, so the run is for one round. Raises, naming the fix, when only a clone-built round
    (or none) has the benchmark on this type."""
    for round_ in reversed(ROUNDS.values()):
        accepted = round_.scenarios_for(system_type, benchmark_name)
        if accepted and round_.builds_from_release:
            return round_.name, accepted
    having = [round_ for round_ in ROUNDS.values() if round_.scenarios_for(system_type, benchmark_name)]
    if having:
        named = having[-1]
        raise RoundError(f"{benchmark_name} from {system_type} systems is in round {named.name} only, whose LoadGen is "
                         f"built from a clone of {CLONE_URL}: name the round and the clone, --round={named.name} "
                         "LOADGEN_SRC=<clone> (documentation/rounds.md)")
    raise RoundError(f"no round accepts {benchmark_name} from {system_type} systems: name the scenarios "
                     "(--scenarios=offline) to measure them")


def round_choice(round_name: str, source: str, benchmark_name: str, scenario: Scenario, system_type: str) -> str:
    """Which round a test is for and why, for the run's plan and ``make info``: where the value came from (the
    default, RUN_ARGS, a config class) and, when another round is the newest to take the test, that round and how
    to run it (a clone-built round with its clone: the default never takes one)."""
    newest = newest_round(benchmark_name, scenario, system_type)
    test = f"{benchmark_name} {scenario.value} on {system_type} systems"
    if newest is None:
        return f"round {round_name} ({source}; no round takes {test})"
    if newest == round_name:
        return f"round {round_name} ({source}; the newest round that takes {test})"
    fix = f"--round={newest}" + ("" if ROUNDS[newest].builds_from_release else " LOADGEN_SRC=<clone>")
    return f"round {round_name} ({source}; the newest round that takes {test} is {newest}: {fix})"


def get_round(name: str) -> Round:
    """The round called ``name`` (v4.1, v5.0, ...); an unknown name gets the list."""
    try:
        return ROUNDS[name]
    except KeyError:
        raise RoundError(f"unknown round '{name}'; valid rounds: {', '.join(ROUNDS)} (--round=... or ROUND=...)"
                         ) from None
