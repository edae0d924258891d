"""A trained GPT-J-architecture proxy, to judge the in-flight engine's FP8 paths on a model whose next-token
distributions are peaked (random weights give near-flat ones, where any rounding flips the choice).

Three steps, two machines:

    python3 -m scripts.gpu.gptj_proxy corpus --out build/proxy              # here: English text -> GPT-2 token ids
    python3 -m scripts.gpu.gptj_proxy train-eval --corpus build/proxy --out DIR   # GPU: train, then generate
    python3 -m scripts.gpu.gptj_proxy score --outputs DIR/proxy_outputs.json    # here: ROUGE as MLPerf scores it

- ``corpus``: the docstrings of Python's standard library and numpy and Python's ``pydoc`` topics (real English
  prose, with some code, shipped with every Python), one document each, tokenized with GPT-J's tokenizer and
  joined by EOS (so the proxy learns to end a text). The last 5% of documents are held out.
- ``train-eval``: a GPT-J-architecture model (``PROXY`` below: GPT-J's block, rotary embedding and vocabulary, 768
  wide, 6 layers) trained from scratch on the training documents; then beam-4 generation (min 30, max 128 new
  tokens) on held-out prompts with the in-flight engine in bf16 and in each FP8 variant, and the eager model's
  beam search in float32 as the reference implementation.
  ``--task summary`` trains on documents followed by ``SUMMARY_SEPARATOR`` and their lead sentences instead, and
  evaluates on held-out documents: a summarisation-like task (mostly copying, as CNN/DailyMail's highlights are)
  that a small model learns well, so its ROUGE is high and its noise small enough for the FP8 gate's 0.5%.
- ``score``: ROUGE-1/2/L of every variant's outputs against the references (the text that followed each prompt,
  or the lead), computed by ``code.llm.rouge.compute_rouge`` (the MLPerf way), each as a ratio to bf16's,
  plus ROUGE of FP8 outputs against bf16's and token agreement.
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import json
import math
import pkgutil
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np

EOS = 50256
HELD_OUT_FRACTION = 0.05
PROMPT_TOKENS = 384  # each evaluation prompt: this many held-out tokens ...
REFERENCE_TOKENS = 96  # ... and the reference is the text that followed them
MIN_DOC_CHARS = 120
# The summary task: a document, SUMMARY_SEPARATOR, then the document's lead (its first sentences, LEAD_MIN to
# LEAD_MAX tokens, ending where a sentence ends) and EOS. Like CNN/DailyMail's highlights it is mostly copied from
# the article, so a small model learns it well and its ROUGE is high and stable: a proxy on which a 0.5% change
# means something. Documents are runs of consecutive sentences of the corpus starting at a random sentence, of a
# random length: every example is new, so the model must learn to copy, not memorise leads.
SUMMARY_SEPARATOR = "\n\nTL;DR:"
LEAD_MIN, LEAD_MAX = 40, 100
DOC_MIN, DOC_MAX = 120, 700
SENTENCE_MIN, SENTENCE_MAX = 3, 80  # tokens of a sentence the documents are made of
SUMMARY_TRAIN_EXAMPLES = 48000
SUMMARY_SEQ = 1024  # training windows of the summary task: the longest example fits
SKIPPED_MODULES = ("antigravity", "this", "idlelib", "tkinter", "turtle", "turtledemo", "test", "lib2to3",
                   "ensurepip", "venv", "pydoc_data", "__main__")


def _docstrings(obj: object, texts: list[str], depth: int = 0) -> None:
    """``obj``'s docstring and, for modules and classes, those of their members (one level of classes)."""
    doc = inspect.getdoc(obj)
    if doc and len(doc) >= MIN_DOC_CHARS:
        texts.append(doc)
    if depth > 1 or not (inspect.ismodule(obj) or inspect.isclass(obj)):
        return
    try:
        members = sorted(vars(obj).items(), key=lambda kv: kv[0])
    except TypeError:
        return
    for name, member in members:
        if not name.startswith("_") and (inspect.isclass(member) or inspect.isroutine(member)):
            _docstrings(member, texts, depth + 1)


def _documents() -> list[str]:
    """Docstrings of the standard library and numpy (modules, classes, functions, methods) and pydoc's topics, in
    a fixed order, without repeats."""
    from pydoc_data.topics import topics

    texts = [topics[name] for name in sorted(topics)]
    names = sorted(set(sys.stdlib_module_names) - set(SKIPPED_MODULES)) + ["numpy"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name in names:
            if name.startswith("_"):
                continue
            try:
                module = importlib.import_module(name)
            except Exception:  # noqa: BLE001 - a module that cannot import on this machine has no text to give
                continue
            modules = [module]
            for info in pkgutil.walk_packages(getattr(module, "__path__", []), prefix=f"{name}."):
                if any(part.startswith("_") or part in ("tests", "testing") for part in info.name.split(".")[1:]):
                    continue
                try:
                    modules.append(importlib.import_module(info.name))
                except Exception:  # noqa: BLE001 - as above
                    continue
            for mod in modules:
                _docstrings(mod, texts)
    seen: set[str] = set()
    return [t for t in texts if not (t in seen or seen.add(t))]


def lead_length(sentences: list[np.ndarray]) -> int | None:
    """Tokens of the lead: the fewest first sentences that make at least LEAD_MIN tokens; None past LEAD_MAX."""
    total = 0
    for sentence in sentences:
        total += len(sentence)
        if total >= LEAD_MIN:
            return total if total <= LEAD_MAX else None
    return None


def summary_examples(sentences: list[np.ndarray], separator: list[int], count: int, seed: int
                     ) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """``count`` (prompt, reference) pairs: documents of DOC_MIN to DOC_MAX tokens made of consecutive
    ``sentences`` from a random start, each followed by the separator; the reference is the document's lead."""
    rng = np.random.default_rng(seed)
    prompts, references = [], []
    while len(prompts) < count:
        first, target = int(rng.integers(len(sentences))), int(rng.integers(DOC_MIN, DOC_MAX + 1))
        chosen, total = [], 0
        for sentence in sentences[first:]:
            if total + len(sentence) > DOC_MAX:
                break
            chosen.append(sentence)
            total += len(sentence)
            if total >= target:
                break
        lead = lead_length(chosen)
        if total < DOC_MIN or lead is None:
            continue
        document = np.concatenate(chosen)
        prompts.append(np.concatenate((document, separator)).astype(np.int32))
        references.append(document[:lead].astype(np.int32))
    return prompts, references


def split_sentences(ids: list[int], ends_sentence: np.ndarray) -> list[list[int]]:
    """A document's sentences of SENTENCE_MIN to SENTENCE_MAX tokens (each ends with a sentence-ending token)."""
    sentences, current = [], []
    for token in ids:
        current.append(token)
        if ends_sentence[token]:
            if SENTENCE_MIN <= len(current) <= SENTENCE_MAX:
                sentences.append(current)
            current = []
    return sentences


def _flat(rows: list) -> tuple[np.ndarray, np.ndarray]:
    return (np.concatenate([np.asarray(r, dtype=np.int32) for r in rows]),
            np.cumsum([len(r) for r in rows]).astype(np.int64))


def _rows(flat: np.ndarray, ends: np.ndarray) -> list[np.ndarray]:
    return np.split(flat, ends[:-1])


def corpus(out: Path) -> None:
    from code.gptj.tokenizer import load_tokenizer

    tokenizer = load_tokenizer()
    documents = _documents()
    split = int(len(documents) * (1 - HELD_OUT_FRACTION))
    streams = {}
    ends_sentence = np.array([tokenizer.decode([t]).rstrip().endswith((".", "!", "?"))
                              for t in range(len(tokenizer))], dtype=bool)
    streams["summary_separator"] = np.array(tokenizer.encode(SUMMARY_SEPARATOR), dtype=np.int32)
    for name, docs in (("train", documents[:split]), ("held_out", documents[split:])):
        ids: list[int] = []
        encoded_docs = tokenizer.encode_batch(docs)
        for encoded in encoded_docs:
            ids.extend(encoded)
            ids.append(EOS)
        streams[name] = np.array(ids, dtype=np.int32)
        sentences = [s for encoded in encoded_docs for s in split_sentences(encoded, ends_sentence)]
        streams[f"sentences_{name}"], streams[f"sentence_ends_{name}"] = _flat(sentences)
    out.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(out / "corpus.npz", **streams)
    print(f"{len(documents)} documents; train {len(streams['train']):,} tokens, held out "
          f"{len(streams['held_out']):,} tokens; sentences for the summary task: "
          f"{len(streams['sentence_ends_train']):,} train, {len(streams['sentence_ends_held_out']):,} held out "
          f"-> {out / 'corpus.npz'}")


def train_eval(corpus_dir: Path, out: Path, steps: int, prompts: int, device_name: str = "cuda",
               task: str = "continue") -> None:
    """``task``: ``continue`` (prompts are windows of held-out text, references the text that followed) or
    ``summary`` (prompts are held-out documents + separator, references their leads; see SUMMARY_SEPARATOR)."""
    import torch
    import torch.nn.functional as F

    from code.gptj.backends.inflight import calibrate_on
    from code.gptj.inflight.layers import InflightModel
    from code.gptj.model import Gptj, GptjConfig
    from code.llm.generation import GenerationConfig, cache_shape, generate
    from code.llm.inflight_engine import EngineOptions, InflightEngine

    out.mkdir(parents=True, exist_ok=True)
    device = torch.device(device_name)
    data = np.load(corpus_dir / "corpus.npz")
    train = torch.as_tensor(data["train"].astype(np.int64), device=device)
    held = data["held_out"].astype(np.int64)
    config = GptjConfig(n_embd=768, n_layer=6, n_head=12, rotary_dim=16, n_inner=3072)
    torch.manual_seed(0)
    model = Gptj(config).to(device)
    for name, p in model.named_parameters():
        if p.dim() >= 2:
            torch.nn.init.normal_(p, 0.0, 0.02)
        elif "norm" not in name:
            torch.nn.init.zeros_(p)
    torch.backends.cuda.matmul.allow_tf32 = True
    optimizer = torch.optim.AdamW(model.parameters(), lr=6e-4, weight_decay=0.1, betas=(0.9, 0.95))
    seq, batch = (SUMMARY_SEQ, 16) if task == "summary" else (256, 48)
    if task == "summary":  # windows start where examples start, so each holds a whole document and its lead
        separator = data["summary_separator"].tolist()
        prompts_, leads = summary_examples(_rows(data["sentences_train"], data["sentence_ends_train"]), separator,
                                           SUMMARY_TRAIN_EXAMPLES, seed=0)
        stream, ends = _flat([np.concatenate((p, r, [EOS])) for p, r in zip(prompts_, leads, strict=True)])
        train = torch.as_tensor(stream.astype(np.int64), device=device)
        example_starts = torch.as_tensor(np.concatenate(([0], ends[:-1])), device=device).clamp(
            max=len(train) - seq - 2)
    generator = torch.Generator(device=device).manual_seed(0)
    log = []
    started = time.perf_counter()
    model.train()
    for step in range(steps):
        lr = 6e-4 * min(1.0, (step + 1) / 100) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * step / steps)))
        for group in optimizer.param_groups:
            group["lr"] = lr
        if task == "summary":
            starts = example_starts[torch.randint(0, len(example_starts), (batch,), device=device,
                                                  generator=generator)]
        else:
            starts = torch.randint(0, len(train) - seq - 1, (batch,), device=device, generator=generator)
        window = train[starts[:, None] + torch.arange(seq + 1, device=device)]
        logits = model(window[:, :-1])  # float32 weights, TF32 matrix products (the model's masks need float32)
        loss = F.cross_entropy(logits.float().view(-1, config.vocab_size), window[:, 1:].reshape(-1))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        if step % 200 == 0 or step == steps - 1:
            log.append({"step": step, "loss": round(float(loss), 4)})
            print(f"step {step} loss {float(loss):.3f}", flush=True)
    train_s = time.perf_counter() - started
    model.eval()
    with torch.no_grad():
        held_t = torch.as_tensor(held[: (len(held) // (seq + 1)) * (seq + 1)], device=device).view(-1, seq + 1)
        rows = 64 * 256 // seq  # the same number of held-out tokens for either task
        held_loss = float(F.cross_entropy(model(held_t[:rows, :-1]).float().reshape(-1, config.vocab_size),
                                          held_t[:rows, 1:].reshape(-1)))
    if task == "summary":  # documents of held-out sentences and their leads
        chosen, leads = summary_examples(_rows(data["sentences_held_out"], data["sentence_ends_held_out"]),
                                         separator, prompts, seed=1)
        references = [r.tolist() for r in leads]
    else:  # evenly spaced windows of the held-out stream; references: the tokens that followed
        span = PROMPT_TOKENS + REFERENCE_TOKENS
        starts = np.linspace(0, len(held) - span - 1, prompts).astype(int)
        chosen = [held[s: s + PROMPT_TOKENS].astype(np.int32) for s in starts]
        references = [held[s + PROMPT_TOKENS: s + span].tolist() for s in starts]
    longest = max(len(p) for p in chosen)
    generation = GenerationConfig()
    outputs: dict[str, list[list[int]]] = {}
    seconds: dict[str, float] = {}

    def timed(name: str, fn: Any) -> None:
        t0 = time.perf_counter()
        outputs[name] = [o.tolist() for o in fn()]
        seconds[name] = round(time.perf_counter() - t0, 2)
        print(f"{name}: {seconds[name]} s, mean output {np.mean([len(o) for o in outputs[name]]):.1f}", flush=True)

    torch.backends.cuda.matmul.allow_tf32 = False  # the reference generates in true float32
    model.setup_caches(*cache_shape([longest] * 16, generation))  # batches of 16 prompts, at most the longest
    timed("fp32_eager", lambda: [o for i in range(0, len(chosen), 16)
                                 for o in generate(model, chosen[i: i + 16], generation)])
    model.setup_caches(1, 1)
    bf16 = Gptj(config).to(device)
    bf16.load_state_dict(model.state_dict())
    bf16 = bf16.to(torch.bfloat16).eval()
    options = EngineOptions(slots=32, max_prompt_length=longest)
    inflight = InflightModel.from_model(bf16)
    amax = calibrate_on(inflight, [train[i * 4099: i * 4099 + 512].cpu().numpy() for i in range(32)])
    timed("bf16", lambda: InflightEngine(inflight, generation, options).generate(chosen))
    timed("bf16_kv_fp8", lambda: InflightEngine(inflight, generation,
                                                EngineOptions(**{**options.__dict__, "kv_dtype": torch.float8_e4m3fn}),
                                                kv_amax=amax).generate(chosen))
    inflight.use_fp8_gemms(amax)
    timed("fp8_gemms", lambda: InflightEngine(inflight, generation, options).generate(chosen))
    timed("fp8_gemms_kv_fp8", lambda: InflightEngine(inflight, generation,
                                                     EngineOptions(**{**options.__dict__,
                                                                      "kv_dtype": torch.float8_e4m3fn}),
                                                     kv_amax=amax).generate(chosen))
    name = torch.cuda.get_device_name() if device.type == "cuda" else "cpu"
    result = {"device": name, "date": time.strftime("%Y-%m-%d"), "config": config.to_dict(), "task": task,
              "steps": steps, "batch": batch, "seq": seq, "train_tokens": int(len(train)), "train_s": round(train_s, 1),
              "loss_log": log, "held_out_loss": held_loss, "prompt_tokens": int(np.mean([len(p) for p in chosen])),
              "references": references, "outputs": outputs, "generate_s": seconds, "amax": amax.as_dict()}
    (out / "proxy_outputs.json").write_text(json.dumps(result))
    print(f"trained {steps} steps in {train_s:.0f} s; held-out loss {held_loss:.3f}")


def score(outputs_file: Path) -> dict[str, Any]:
    from code.gptj.tokenizer import load_tokenizer
    from code.llm.rouge import compute_rouge

    tokenizer = load_tokenizer()
    data = json.loads(outputs_file.read_text())

    def text(ids: list[int]) -> str:
        return tokenizer.decode(ids, skip_special_tokens=True, clean_up_tokenization_spaces=True)

    references = [text(r) for r in data["references"]]
    texts = {name: [text(o) for o in outs] for name, outs in data["outputs"].items()}
    rows: dict[str, Any] = {}
    base = compute_rouge(texts["bf16"], references)
    for name, predictions in texts.items():
        rouge = compute_rouge(predictions, references)
        against_bf16 = compute_rouge(predictions, texts["bf16"])
        same = sum(a == b for a, b in zip(data["outputs"][name], data["outputs"]["bf16"], strict=True))
        rows[name] = {
            "rouge_vs_reference": {k: rouge[k] for k in ("rouge1", "rouge2", "rougeL")},
            "ratio_to_bf16": {k: round(rouge[k] / base[k], 5) for k in ("rouge1", "rouge2", "rougeL")},
            "rouge_vs_bf16_outputs": {k: against_bf16[k] for k in ("rouge1", "rouge2", "rougeL")},
            "identical_to_bf16": f"{same}/{len(predictions)}",
            "mean_output_tokens": round(float(np.mean([len(o) for o in data["outputs"][name]])), 1),
        }
    print(f"proxy: {data['config']['n_layer']} layers x {data['config']['n_embd']}, {data['steps']} steps on "
          f"{data['train_tokens']:,} tokens, held-out loss {data['held_out_loss']:.3f}; "
          f"{len(references)} prompts of {data['prompt_tokens']} tokens ({data['device']}, {data['date']})")
    print(f"{'variant':>18} {'R1':>7} {'R2':>7} {'RL':>7}  {'ratio to bf16 (R1/R2/RL)':>26}  {'vs bf16 out R1':>14}"
          f"  identical  mean len")
    for name, row in rows.items():
        r, q = row["rouge_vs_reference"], row["ratio_to_bf16"]
        print(f"{name:>18} {r['rouge1']:7.4f} {r['rouge2']:7.4f} {r['rougeL']:7.4f}  "
              f"{q['rouge1']:8.4f} {q['rouge2']:8.4f} {q['rougeL']:8.4f}  "
              f"{row['rouge_vs_bf16_outputs']['rouge1']:14.4f}  {row['identical_to_bf16']:>9}  "
              f"{row['mean_output_tokens']:8.1f}")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="step", required=True)
    p = sub.add_parser("corpus")
    p.add_argument("--out", type=Path, default=Path("build/proxy"))
    p = sub.add_parser("train-eval")
    p.add_argument("--corpus", type=Path, default=Path("build/proxy"))
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--steps", type=int, default=1500)
    p.add_argument("--prompts", type=int, default=128)
    p.add_argument("--device", default="cuda", help="cpu: a smoke test of the steps (FP8 emulated)")
    p.add_argument("--task", choices=("continue", "summary"), default="continue")
    p = sub.add_parser("score")
    p.add_argument("--outputs", type=Path, required=True)
    args = parser.parse_args()
    if args.step == "corpus":
        corpus(args.out)
    elif args.step == "train-eval":
        train_eval(args.corpus, args.out, args.steps, args.prompts, args.device, args.task)
    else:
        score(args.outputs)


if __name__ == "__main__":
    main()
