"""A backend's switches: declared once beside the backend, joined into the field table, checked by one set of rules.

The table is the harness's fields (code/config/fields.py) and each backend's switches (its declaration in
code/<bench>/backends/__init__.py; the BERT packed path's kernels in code/bert/packed/spec.py). code/config names
no switch, so a new one is a change to its backend alone; the last test adds one the way a real change would and
follows it through the command line, the resolved config, the rules, --help and the docs.
"""

from __future__ import annotations

import ast
import dataclasses
import itertools
from pathlib import Path

import pytest

import code.bert.backends as bert_backends
from code.bert.packed.spec import KERNEL_SWITCHES, PackedKernels
from code.common.constants import Benchmark, Scenario
from code.common.paths import REPO_ROOT
from code.config.backends import BackendDeclaration, declarations
from code.config.field_spec import Field
from code.config.fields import FIELDS, HARNESS_FIELDS, FieldError, check_combination, switches_of
from code.config.resolve import resolve_config
from code.config.resolved import WorkloadSetting, check_run_args_used
from code.mlperf.arguments import ALIASES, field_groups, format_help, parse_run_args

SWITCHES = {name: fld for name, fld in FIELDS.items() if fld.owners}


def test_the_table_is_the_harness_fields_then_each_backends_switches():
    assert list(FIELDS)[:len(HARNESS_FIELDS)] == [fld.name for fld in HARNESS_FIELDS]
    assert not any(fld.owners for fld in HARNESS_FIELDS)
    for benchmark in Benchmark:
        for declared in declarations(benchmark):
            for switch in declared.switches:
                fld = FIELDS[switch.name]
                assert (benchmark, declared.name) in fld.owners and benchmark in fld.benchmarks, switch.name
                assert fld.used_by(benchmark, declared.name)
    # one switch two backends declare is one field: both read it, its benchmarks are theirs, its help joins theirs
    graphs = FIELDS["cuda_graphs"]
    assert graphs.owners == ((Benchmark.BERT, "pytorch"), (Benchmark.GPTJ, "inflight"), (Benchmark.LLAMA31, "inflight"))
    assert graphs.benchmarks == (Benchmark.BERT, Benchmark.GPTJ, Benchmark.LLAMA31)
    assert not graphs.used_by(Benchmark.GPTJ, "pytorch") and not graphs.used_by(Benchmark.LLAMA31, "pytorch")
    assert "one per token bucket" in graphs.description and "one per decode step" in graphs.description
    assert FIELDS["fp8_fast_accum"].owner_text() == "bert pytorch, gptj inflight, llama3.1-8b inflight"
    assert {name for name in SWITCHES} >= {"fast_path", "fp8_gemms", "attention_kernel", "gelu_in_gemm",
                                           "fp8_residual", "fp8_attention", "graph_max_tokens", "kv_cache_dtype",
                                           "synthetic_output_lengths", "oracle_shift", "oracle_drop"}


def _literals(path: Path) -> set[str]:
    """The string constants of a module that are not docstrings."""
    tree = ast.parse(path.read_text())
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef)) and node.body
                  and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}
    return {node.value for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings}


def test_the_lower_rooms_name_no_switch():
    """code/common, code/config and code/mlperf know fields, not backends: no switch's name is written in them
    (NVIDIA's spelling of one, in the aliases table, aside), so adding, renaming or removing a switch never touches
    them."""
    named = {f"{path.parent.name}/{path.name}": sorted(_literals(path) & set(SWITCHES))
             for room in ("common", "config", "mlperf") for path in sorted((REPO_ROOT / "code" / room).glob("*.py"))}
    named = {module: names for module, names in named.items() if names}
    assert named == {"mlperf/arguments.py": sorted(set(ALIASES.values()) & set(SWITCHES))}


def test_one_switch_declared_differently_or_as_a_harness_field_is_refused(monkeypatch):
    pytorch, oracle = bert_backends.DECLARATIONS
    other = Field("graph_max_tokens", int, 1, "another default")
    monkeypatch.setattr(bert_backends, "DECLARATIONS", (pytorch, dataclasses.replace(oracle, switches=(other,))))
    with pytest.raises(TypeError, match="switch 'graph_max_tokens' is declared by bert pytorch and bert oracle "
                                        "differently"):
        switches_of(HARNESS_FIELDS)
    harness = Field("seed", int, 0, "a backend's own seed")
    monkeypatch.setattr(bert_backends, "DECLARATIONS", (pytorch, dataclasses.replace(oracle, switches=(harness,))))
    with pytest.raises(TypeError, match="the bert oracle backend declares switch 'seed', a field of the harness"):
        switches_of(HARNESS_FIELDS)


def _values(**given: object) -> dict[str, object]:
    values = {name: fld.default for name, fld in FIELDS.items() if fld.applies_to(Benchmark.BERT, Scenario.Offline)}
    return values | {"backend": "pytorch"} | given


KERNEL_VALUES = {
    "precision": ("fp16", "bf16", "fp8", "int8"),
    "fp8_fast_accum": (False, True),
    "fp8_gemms": ("qkv+wo+w1+w2", "wo+w1+w2", "qkv"),
    "attention_kernel": ("triton", "flash"),
    "fp8_residual": (False, True),
    "fp8_attention": (False, True),
}


def test_the_config_and_the_engine_spec_follow_one_set_of_rules():
    """Every combination of the packed path's switches (and precision) that the configuration refuses, the engine
    spec refuses when made, with the same sentence, and every other one makes a spec; a resolved config's spec is
    then made once and passed whole, and nothing downstream checks it again."""
    refused = 0
    for combination in itertools.product(*KERNEL_VALUES.values()):
        given = dict(zip(KERNEL_VALUES, combination, strict=True))
        try:
            check_combination(Benchmark.BERT, _values(**given), {})
            config_error = None
        except FieldError as error:
            config_error = str(error)
        try:
            PackedKernels(**given)  # type: ignore[arg-type]
            spec_error = None
        except ValueError as error:
            spec_error = str(error)
        assert (config_error is None) == (spec_error is None), (given, config_error, spec_error)
        if config_error:
            refused += 1
            # the same rule: the config's names the value's source, the spec's the bare field
            assert config_error.replace(" (set by default)", "") == spec_error, given
    assert 0 < refused < len(list(itertools.product(*KERNEL_VALUES.values())))
    assert [fld.name for fld in KERNEL_SWITCHES] == [f.name for f in dataclasses.fields(PackedKernels)][1:]
    assert PackedKernels.from_values(_values(precision="fp8")) == PackedKernels(precision="fp8")


def test_a_new_engine_switch_is_a_change_to_its_backend_alone(monkeypatch):
    """A new switch of the BERT packed path, added as a real change adds it: its ``Field`` in the pytorch backend's
    switches and its attribute on the spec (code/bert/packed/spec.py, here a test backend's own), and the rule between
    it and the precision in the backend's rules. Nothing in code/config changes, and the switch is then a flag, a
    resolved value with its source, a refused combination, a --help entry and a row of the docs' table; a run on a
    backend or benchmark without it refuses it."""
    pytorch, oracle = bert_backends.DECLARATIONS
    softmax = Field("fp8_softmax", bool, False, "BERT packed path, fp8: the attention's softmax in e4m3", engine=True)

    def rules(values, origin):
        if values.get("fp8_softmax") and values.get("precision") != "fp8":
            return f"{origin('fp8_softmax')} = True needs --precision=fp8"
        return pytorch.check(values, origin)

    @dataclasses.dataclass(frozen=True)
    class Kernels(PackedKernels):
        fp8_softmax: bool = False

    with_switch = dataclasses.replace(pytorch, switches=(*pytorch.switches, softmax), check=rules)
    monkeypatch.setattr(bert_backends, "DECLARATIONS", (with_switch, oracle))
    table = switches_of(HARNESS_FIELDS)
    monkeypatch.setitem(FIELDS, "fp8_softmax", table["fp8_softmax"])  # the table every module reads

    assert FIELDS["fp8_softmax"].owners == ((Benchmark.BERT, "pytorch"),)
    assert parse_run_args(["--fp8_softmax"]).overrides == {"fp8_softmax": True}
    workload = WorkloadSetting()
    config = resolve_config(Benchmark.BERT, Scenario.Offline, "CPU", workload, {"model_name": "tiny"})
    assert config["fp8_softmax"] is False and config.sources["fp8_softmax"] == "default"
    given = resolve_config(Benchmark.BERT, Scenario.Offline, "CPU", workload,
                           {"model_name": "tiny", "precision": "fp8", "fp8_softmax": True, "device": "cpu"})
    assert Kernels.from_values(given.values).fp8_softmax is True  # the spec reads it by name
    with pytest.raises(FieldError, match=r"^--fp8_softmax = True needs --precision=fp8$"):
        resolve_config(Benchmark.BERT, Scenario.Offline, "CPU", workload, {"fp8_softmax": True})
    groups = dict(field_groups())
    assert "fp8_softmax" in groups["Switches of the bert pytorch backend"]
    assert "  --fp8_softmax " in format_help()
    from scripts.document_fields import table

    assert "| `fp8_softmax` | bool | `False` | bert pytorch backend | BERT packed path, fp8:" in table()
    gptj = resolve_config(Benchmark.GPTJ, Scenario.Offline, "CPU", workload, {})
    with pytest.raises(FieldError, match=r"--fp8_softmax is an option of the bert pytorch backend, and this run has "
                                         r"gptj-99 Offline: leave --fp8_softmax out"):
        check_run_args_used({"fp8_softmax": True}, [gptj])
    oracle_run = resolve_config(Benchmark.BERT, Scenario.Offline, "CPU", workload, {"backend": "oracle"})
    with pytest.raises(FieldError, match="--fp8_softmax=true is an option of the pytorch backend, not of oracle"):
        check_run_args_used({"fp8_softmax": True}, [oracle_run])


def test_a_backend_declaration_holds_its_switches():
    """What the declarations say is what the table holds: each backend's own switches, none of another's."""
    by_backend = {(benchmark, declared.name): {s.name for s in declared.switches}
                  for benchmark in Benchmark for declared in declarations(benchmark)}
    assert by_backend[(Benchmark.BERT, "pytorch")] >= {"fast_path", "cuda_graphs", *(s.name for s in KERNEL_SWITCHES)}
    assert by_backend[(Benchmark.BERT, "oracle")] == {"oracle_shift", "oracle_batch_ms"}
    assert by_backend[(Benchmark.GPTJ, "pytorch")] == set()
    assert by_backend[(Benchmark.GPTJ, "inflight")] == {"kv_cache_dtype", "fp8_fast_accum", "cuda_graphs",
                                                        "synthetic_output_lengths"}
    assert all(isinstance(declared, BackendDeclaration) for benchmark in Benchmark
               for declared in declarations(benchmark))
