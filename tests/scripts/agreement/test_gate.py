"""The agreement tool (scripts/agreement/gate.py, ``make agreement``): agreement on toy logits, bars, the gate,
and tiny agreement runs on the CPU. Its real-text inputs and fine-tuning have their own test files."""

from __future__ import annotations

import json

import numpy as np
import pytest

from code.bert.accuracy import PAD_LOGIT
from code.bert.squad import MAX_SEQ_LENGTH
from scripts.agreement import comparison, gate
from scripts.agreement import report as findings
from scripts.agreement.comparison import best_spans, compare, logit_errors, position_view
from scripts.agreement.gate import AgreementError, parse_precisions, parse_require
from scripts.agreement.report import TARGET_BARS, Bar
from scripts.agreement.text_inputs import build_text_inputs


@pytest.fixture(scope="module")
def text_inputs():
    return build_text_inputs(300, seed=0)


def _peaked_logits(text_inputs, shift: int = 0) -> np.ndarray:
    """Logits that put each feature's answer at its gold span (or, without one, its first context token)."""
    features = text_inputs.features
    logits = np.full((len(features), MAX_SEQ_LENGTH, 2), PAD_LOGIT, dtype=np.float32)
    rng = np.random.default_rng(0)
    for i, feature in enumerate(text_inputs.eval_features):
        length = int(features.lengths[i])
        logits[i, :length] = rng.normal(0, 0.1, (length, 2))
        start = feature.start_position or feature.doc_offset
        end = feature.end_position or feature.doc_offset
        logits[i, min(start + shift, length - 2), 0] = 10.0
        logits[i, min(end + shift, length - 2), 1] = 10.0
    return logits


def test_identical_logits_agree_fully(text_inputs):
    reference = _peaked_logits(text_inputs)
    result = compare(reference, reference.copy(), text_inputs.features.lengths, text_inputs.postprocess)
    assert result.span_agreement == 1.0 and result.answer_agreement == 1.0
    assert result.max_abs_error == 0.0 and result.mean_abs_error == 0.0 and result.spans_differ == 0


def test_best_spans_are_the_scorers_choice(text_inputs):
    view = position_view(text_inputs.postprocess)
    spans = best_spans(view, _peaked_logits(text_inputs))
    for feature, span in zip(text_inputs.eval_features, spans, strict=True):
        if feature.start_position and feature.token_is_max_context.get(feature.start_position):
            assert span == (feature.start_position, feature.end_position)


def test_shifted_logits_disagree(text_inputs):
    reference = _peaked_logits(text_inputs)
    shifted = _peaked_logits(text_inputs, shift=1)
    result = compare(reference, shifted, text_inputs.features.lengths, text_inputs.postprocess)
    assert result.span_agreement < 0.5 and result.spans_differ > 0 and result.answer_agreement < 1.0
    assert result.max_abs_error > 9.0
    # span disagreement alone is information: a random-head model is never gated, whatever its bar
    row = findings.Row("tiny", "fp16", Bar(0.995, "bert-99"), result, path="eager float16")
    assert row.passed is None and row.qualifies("bert-99") is None


def test_logit_errors_count_real_tokens_only():
    reference = np.zeros((2, 4, 2), dtype=np.float32)
    candidate = reference.copy()
    candidate[0, 1, 0] = 0.5  # real token
    candidate[1, 3, 1] = 100.0  # padding of a 2-token feature: ignored
    per_feature, max_error, mean_error = logit_errors(reference, candidate, np.array([3, 2]))
    assert per_feature.tolist() == [0.5, 0.0] and max_error == 0.5
    assert mean_error == pytest.approx(0.5 / (2 * (3 + 2)))


def test_require_bars():
    assert parse_require("0.99", ["fp16", "fp8"]) == {"fp16": Bar(0.99, "0.99"), "fp8": Bar(0.99, "0.99")}
    assert parse_require("fp8=bert-99", ["fp16", "fp8"]) == {"fp8": Bar(0.995, "bert-99")}  # fp16: reported only
    assert parse_require("bert-99,fp16=bert-99.9", ["fp16", "fp8"]) == {
        "fp16": Bar(0.9995, "bert-99.9"),
        "fp8": Bar(0.995, "bert-99"),
    }
    assert parse_require("none", ["fp16", "fp8"]) == {}
    with pytest.raises(AgreementError, match="not in --precisions"):
        parse_require("bf16=bert-99", ["fp16"])
    with pytest.raises(AgreementError, match="not a ratio"):
        parse_require("99", ["fp16"])
    with pytest.raises(AgreementError, match="names no bar"):
        parse_require("fp16=bert-98", ["fp16"])
    with pytest.raises(AgreementError, match="stands alone"):
        parse_require("none,fp8=bert-99", ["fp8"])


def test_require_configs_adds_the_configs_engines():
    configs = {"fp8:fp8_fast_accum=true": Bar(0.995, "bert-99", "configs"), "fp16": Bar(0.9995, "bert-99.9")}
    bars = parse_require("configs,fp16=0.99", ["fp16", "bf16"], configs=lambda: configs)
    # the configs' engine not in --precisions is required too; an item's own bar given here beats the configs'
    assert bars == {"fp16": Bar(0.99, "0.99"), "fp8:fp8_fast_accum=true": configs["fp8:fp8_fast_accum=true"]}
    args = gate.parse_args(["--device=cpu", "--models=tiny", "--precisions=bf16", "--require=configs"])
    plan = gate.make_plan(args)  # every engine of the shipped classes' ladders
    assert [c.label for c in plan.candidates][0] == "bf16"
    assert set(plan.bars) == set(gate.config_requirements()) and "bf16" not in plan.bars
    assert {c.label for c in plan.candidates} == {"bf16", *plan.bars}


def test_the_proxy_figures_are_information_by_default():
    """The real accuracy run chooses the engine (an engine ladder's gate): make agreement requires nothing unless
    asked, so its exit status never stands in for that run."""
    args = gate.parse_args(["--device=cpu", "--models=tiny", "--precisions=bf16"])
    assert args.require == "none" and gate.make_plan(args).bars == {}


def test_config_requirements_follow_the_h100_h200_ladders():
    from code.common.constants import AccuracyTarget, Benchmark, Scenario
    from code.config.resolve import resolve_config
    from code.config.resolved import WorkloadSetting

    bars = gate.config_requirements()
    for system in ("H100_SXM_80GBx1", "H200_SXM_141GBx1", "H200_SXM_141GBx8"):
        for scenario in Scenario:
            for target in AccuracyTarget:
                workload = WorkloadSetting(accuracy_target=target)
                ladder = resolve_config(Benchmark.BERT, scenario, system, workload, {}).ladder
                assert len(ladder) >= 2 and ladder[0].values["precision"] == "fp8"  # FP8 first, then safer ones
                for rung in ladder:
                    config = resolve_config(Benchmark.BERT, scenario, system, workload, {}, rung=rung.name)
                    item = gate.engine_item(config)
                    assert item.partition(":")[0] == config["precision"] == rung.values["precision"]
                    assert ("gelu_in_gemm=true" in item) is config["gelu_in_gemm"]
                    # each engine is held to the strictest target any config uses it for
                    assert bars[item].ratio >= TARGET_BARS[config.benchmark_name]
    assert set(TARGET_BARS) == {"bert-99", "bert-99.9"}
    assert TARGET_BARS["bert-99"] == 0.995 and TARGET_BARS["bert-99.9"] == 0.9995
    values = {"precision": "fp16", "fp8_fast_accum": True, "fp8_gemms": "w1", "attention_kernel": "flash",
              "fp8_residual": False, "fp8_attention": True}
    assert gate.engine_item(values | {"gelu_in_gemm": False}) == "fp16:attention_kernel=flash"
    fp8 = {"precision": "fp8", "fp8_fast_accum": True, "fp8_gemms": "qkv+wo+w1+w2", "attention_kernel": "triton",
           "fp8_residual": False, "fp8_attention": False}
    assert gate.engine_item(fp8 | {"gelu_in_gemm": True}) == "fp8:fp8_fast_accum=true:gelu_in_gemm=true"
    assert (gate.engine_item(fp8 | {"gelu_in_gemm": True, "fp8_residual": True})
            == "fp8:fp8_fast_accum=true:gelu_in_gemm=true:fp8_residual=true")
    assert (gate.engine_item(fp8 | {"gelu_in_gemm": True, "fp8_residual": True, "fp8_attention": True})
            == "fp8:fp8_fast_accum=true:gelu_in_gemm=true:fp8_residual=true:fp8_attention=true")
    # an int8 engine takes fp8_gemms (which GEMMs run in 8 bits), none of FP8's own options
    int8 = fp8 | {"precision": "int8", "fp8_gemms": "w1+w2", "gelu_in_gemm": True, "fp8_residual": True}
    assert gate.engine_item(int8) == "int8:fp8_gemms=w1+w2:gelu_in_gemm=true"


def _gated_row(candidate_f1: float, bar: Bar | None, gated: bool = True) -> findings.Row:
    agreement = comparison.Agreement(
        features=100,
        max_abs_error=0.1,
        mean_abs_error=0.01,
        span_agreement=0.9,  # far below the old span bar: the F1 ratio decides
        spans_differ=10,
        questions=1000,
        answer_agreement=0.95,
        answers_differ=50,
        reference_logit_std=3.0,
        reference_f1=80.0,
        candidate_f1=candidate_f1,
    )
    return findings.Row("minilm-l6-qa", "fp8", bar, agreement, path="packed (PackedRunner)", gated=gated)


def test_the_gate_is_the_f1_ratio_on_the_trained_proxy():
    bert_99, bert_999 = Bar(0.995, "bert-99"), Bar(0.9995, "bert-99.9")
    row = _gated_row(79.7, bert_99)  # 99.625% of float32's F1
    assert row.f1_ratio == pytest.approx(0.99625)
    assert row.passed is True and row.qualifies("bert-99") is True and row.qualifies("bert-99.9") is False
    assert findings.exit_status([row]) == 0
    assert findings.exit_status([_gated_row(79.7, bert_999)]) == findings.EXIT_MISSED
    assert findings.exit_status([_gated_row(79.99, bert_999)]) == 0  # 99.9875%
    assert findings.exit_status([_gated_row(79.5, bert_99)]) == findings.EXIT_MISSED  # 99.375%
    assert findings.exit_status([_gated_row(50.0, None)]) == 0  # reported, not required
    # a random-head model is not gated: its F1 means nothing, so neither its verdict nor the exit status use it
    random_head = _gated_row(10.0, bert_99, gated=False)
    assert random_head.passed is None and random_head.qualifies("bert-99") is None
    assert findings.exit_status([random_head]) == findings.EXIT_NOT_RUN  # a bar, and nothing measured it
    assert "no trained QA proxy" in gate.gate_notes([random_head])[0]
    table = findings.format_rows([row, random_head])
    assert table[1][-3:] == ["bert-99 yes, bert-99.9 no", "bert-99 (>= 99.50%)", "PASS"]
    assert table[2][-3:] == ["not gated (random head)", "bert-99 (>= 99.50%)", "-"]
    (line,) = findings.qualification_lines([row, random_head])
    assert "99.625% of float32's" in line and "bert-99 (>= 99.50%): yes" in line and "bert-99.9 (>= 99.95%): no" in line
    assert "moves the ratio by up to 0.125%" in line  # 100 / 1000 questions / F1 80
    on_cpu = _gated_row(80.0, bert_99)
    on_cpu.path = "eager float32"  # fp8 off the GPU: fp16-rounded weights, no FP8 GEMMs, so no verdict either way
    assert on_cpu.passed is None and on_cpu.qualifies("bert-99") is None and on_cpu.unmeasured
    assert findings.exit_status([row, on_cpu]) == findings.EXIT_NOT_RUN
    assert findings.format_rows([on_cpu])[1][-3:] == [
        "not measured (eager float32, no FP8 GEMMs)",
        "bert-99 (>= 99.50%)",
        "NOT MEASURED",
    ]
    assert "not measured; the gate needs a GPU run" in gate.gate_notes([on_cpu])[0]
    assert findings.qualification_lines([on_cpu]) == []
    no_f1 = _gated_row(0.0, bert_99)
    no_f1.agreement.reference_f1 = 0.0  # float32 scored nothing: the gate cannot measure, so it does not pass
    assert no_f1.passed is False and findings.exit_status([no_f1]) == findings.EXIT_MISSED


def test_agreement_cli_on_cpu(tmp_path, capsys):
    status = gate.main(
        [
            "--device=cpu",
            "--models=tiny",
            "--precisions=bf16",
            "--features=40",
            "--require=none",
            f"--work_dir={tmp_path}",
        ]
    )
    out = capsys.readouterr().out
    assert status == 0, out
    report = json.loads((tmp_path / "agreement.json").read_text())
    (row,) = report["rows"]
    assert row["precision"] == "bf16" and row["agreement"]["features"] >= 40
    assert row["passed"] is None and row["gated"] is False and row["qualifies"] == {"bert-99": None, "bert-99.9": None}
    assert "span agree" in out.splitlines()[-3] and (tmp_path / "agreement.md").is_file()
    assert gate.main(["--device=cpu", "--precisions=fp61"]) == findings.EXIT_USAGE
    assert "valid: fp16, bf16, fp8" in capsys.readouterr().err


def test_precision_variants_and_their_bars():
    valid = ["fp16", "bf16", "fp8"]
    plain, variant, two = parse_precisions(
        "fp16, fp8:fp8_fast_accum=true,fp8:cuda_graphs=false;fp8_fast_accum=1", valid
    )
    assert (plain.label, plain.precision, plain.overrides, plain.is_variant) == ("fp16", "fp16", {}, False)
    assert (variant.label, variant.precision, variant.overrides) == (
        "fp8:fp8_fast_accum=true",
        "fp8",
        {"fp8_fast_accum": "true"},
    )
    assert two.overrides == {"cuda_graphs": "false", "fp8_fast_accum": "1"}
    assert parse_precisions("fp8:a=1:b=x+y", valid)[0].overrides == {"a": "1", "b": "x+y"}  # ':' works unquoted
    for bad, message in [
        ("fp4", "valid: fp16, bf16, fp8"),
        ("fp8:", "PRECISION:NAME=VALUE"),
        ("fp8:fp8_fast_accum", "PRECISION:NAME=VALUE"),
        ("fp8:a=1:a=2", "given twice"),
    ]:
        with pytest.raises(AgreementError, match=message):
            parse_precisions(bad, valid)
    labels = ["fp16", "fp8", "fp8:fp8_fast_accum=true", "fp8:cuda_graphs=false"]
    # a precision's bar covers its variants; a variant's own bar (named by its item) wins; the plain value is the rest
    bars = parse_require("0.9,fp8=bert-99,fp8:fp8_fast_accum=true=bert-99.9", labels)
    assert {label: bar.name for label, bar in bars.items()} == {
        "fp16": "0.9",
        "fp8": "bert-99",
        "fp8:fp8_fast_accum=true": "bert-99.9",
        "fp8:cuda_graphs=false": "bert-99",
    }
    with pytest.raises(AgreementError, match="not in --precisions"):
        parse_require("fp8:fp8_fast_accum=false=0.9", labels)
    with pytest.raises(AgreementError, match="precisions item"):
        parse_require("fp8:fp8_fast_accum=true", labels)  # a variant without its bar
    # option names are checked before any work, against the pytorch backend's options, for each variant
    args = gate.parse_args(["--device=cpu", "--models=minilm-l6-qa", "--precisions=fp16:no_such=1"])
    with pytest.raises(AgreementError, match="no_such: not a settable option of the pytorch backend; valid: .*graphs"):
        gate.make_plan(args)
    args = gate.parse_args(["--device=cpu", "--models=minilm-l6-qa", "--precisions=fp16:cuda_graphs=false"])
    plan = gate.make_plan(args)
    assert plan.models == ["minilm-l6-qa"] and gate.engine_model("minilm-l6-qa") == "minilm-l6"
    assert plan.candidate_options["fp16:cuda_graphs=false"]["cuda_graphs"] is False
    assert "cuda_graphs" not in plan.options  # the fp32 reference keeps the global options


def test_agreement_variants_share_one_engine(tmp_path, monkeypatch, capsys):
    from code.bert.backends import pytorch_engine as engine

    built: list[str] = []
    build = engine.build_engine
    monkeypatch.setattr(
        engine, "build_engine", lambda spec, path, **kw: built.append(spec.precision) or build(spec, path, **kw)
    )
    status = gate.main(
        [
            "--device=cpu",
            "--models=tiny",
            "--precisions=fp16,fp16:cuda_graphs=false",
            "--features=40",
            "--require=0.5,fp16:cuda_graphs=false=bert-99",
            f"--work_dir={tmp_path}",
        ]
    )
    assert status == findings.EXIT_NOT_RUN, capsys.readouterr().out  # bars, but no trained proxy ran
    assert built == ["fp32", "fp16"]  # not one fp16 build per variant
    report = json.loads((tmp_path / "agreement.json").read_text())
    assert [(r["name"], r["options"], r["bar"]["ratio"]) for r in report["rows"]] == [
        ("fp16", {}, 0.5),
        ("fp16:cuda_graphs=false", {"cuda_graphs": "false"}, 0.995),
    ]
    assert any("no trained QA proxy ran" in note for note in report["notes"])
    assert "| tiny | fp16:cuda_graphs=false |" in (tmp_path / "agreement.md").read_text()


def test_fp8_engines_are_calibrated_on_real_text(tmp_path, capsys):
    status = gate.main(
        [
            "--device=cpu",
            "--models=tiny",
            "--precisions=fp8",
            "--features=40",
            "--require=none",
            f"--work_dir={tmp_path}",
        ]
    )
    assert status == 0, capsys.readouterr().out  # on a CPU the fp8 engine runs its 16-bit weights
    report = json.loads((tmp_path / "agreement.json").read_text())
    assert report["calibration"].endswith("(text:seed=2)")
    (row,) = report["rows"]  # the F1 of both sides against the gold answers (MLPerf's rule, as a proxy)
    assert 0 <= row["agreement"]["reference_f1"] <= 100 and 0 <= row["agreement"]["candidate_f1"] <= 100
    assert "F1 vs gold (ratio)" in (tmp_path / "agreement.md").read_text()
    (manifest,) = (tmp_path / "engines").glob("*fp8*/engine.json")
    assert json.loads(manifest.read_text())["calibration"]["source"] == "text:seed=2"


def test_agreement_finetunes_a_qa_model_once(tmp_path, monkeypatch, capsys):
    tiny_qa = gate.FinetunedModel("tiny", lambda: None, "random tiny encoder")
    monkeypatch.setitem(gate.FINETUNED_MODELS, "tiny-qa", tiny_qa)
    argv = [
        "--device=cpu",
        "--models=tiny-qa",
        "--precisions=fp16",
        "--features=40",
        "--require=fp16=0.01",
        "--finetune_features=40",
        "--finetune_epochs=1",
        f"--work_dir={tmp_path}",
    ]
    status = gate.main(argv)
    report = json.loads((tmp_path / "agreement.json").read_text())
    (row,) = report["rows"]
    assert row["model"] == "tiny-qa" and row["agreement"]["features"] >= 40 and row["gated"] is True
    # a trained proxy is gated on its F1 ratio; one epoch of a tiny model may score F1 0 (no ratio: the gate fails)
    if row["f1_ratio"] is None:
        assert status == findings.EXIT_MISSED and row["passed"] is False
    else:
        assert status == (0 if row["f1_ratio"] >= 0.01 else findings.EXIT_MISSED)
        assert row["passed"] is (row["f1_ratio"] >= 0.01)
        assert report["qualification"] and report["qualification"][0].startswith("tiny-qa fp16: F1")
    assert "fine-tuned together" in report["weights"]["tiny-qa"] and "NOT SQuAD" in report["weights"]["tiny-qa"]
    engines = [p for p in (tmp_path / "engines").iterdir() if not p.name.startswith(".")]  # lock files aside
    assert engines and all(p.name.startswith("tiny-") for p in engines)  # tiny engines, strict load
    assert gate.main(argv) == status  # same settings, same folder: the checkpoint is reused
    assert "reusing" in capsys.readouterr().out


def test_unsupported_precision_is_reported_not_failed():
    rows = [findings.Row("large", "fp8", Bar(0.995, "bert-99"), not_run="fp8 is not supported here (ValueError)")]
    assert findings.exit_status(rows) == findings.EXIT_NOT_RUN
    assert "NOT RUN" in findings.format_rows(rows)[1][-1]
