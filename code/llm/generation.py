"""Beam search (and greedy decoding) for our causal LMs, returning for every prompt the tokens HF ``generate`` would.

Any model with ``CausalLM``'s interface (GPT-J's ``code/gptj/model.py``) runs here; ``GenerationConfig``'s defaults
are MLPerf GPT-J's (token 50256 is GPT-J's EOS and pad): another model passes its own ids.

The MLPerf reference calls ``GPTJForCausalLM.generate(num_beams=4, min_new_tokens=30, max_new_tokens=128,
early_stopping=True, pad_token_id=eos)`` one sample at a time. We run many samples at once (``samples × beams`` rows
in the KV cache, prompts left-padded) and reproduce, per sample, the beam search of the installed transformers (5.x
``GenerationMixin._beam_search``):

- scores: each step, ``log_softmax`` of the float32 logits; before ``min_new_tokens`` new tokens the EOS log-prob
  is ``-inf`` (``MinNewTokensLengthLogitsProcessor`` runs after the log-softmax, so nothing is renormalised); a
  beam's score is the sum of its tokens' log-probs. At the first step only beam 0 is live (the others start at -1e9).
- candidates: the top ``2 * num_beams`` of ``num_beams * vocab`` continuations of a sample. Those ending in EOS (or
  reaching ``max_new_tokens``) are finished; the best ``num_beams`` unfinished ones run on.
- finished hypotheses: only candidates ranked in the top ``num_beams`` may finish; their score is
  ``sum_logprobs / generated_len ** length_penalty`` where generated_len counts the new tokens *including* the EOS
  and *excluding* the prompt; the best ``num_beams`` finished hypotheses are kept.
- done: with ``early_stopping=True`` a sample is done once it holds ``num_beams`` finished hypotheses (later ones
  are refused); ``False``/``"never"`` use HF's "can a running beam still beat the worst finished one" test. At
  ``max_new_tokens`` every candidate is finished. The batch stops when every sample is done.
- result: the best finished hypothesis's new tokens, including its final EOS when it ended on one (as HF's output
  for a single prompt; HF's batched output adds pad tokens after it, which we leave out).

transformers 4.x (which the MLPerf reference ran, unpinned, in 2023) normalised by the *whole* hypothesis length,
prompt included and the final EOS excluded (``hyp.shape[-1]``), until 4.36 switched to the generated length. For
``length_penalty=1`` with ~800-token prompts the old rule is nearly an un-normalised sum, which favours earlier EOS;
outputs can therefore differ from the reference's on some samples. We follow the installed version.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor


class CausalLM(Protocol):
    """What generation needs of a model: a forward over a KV cache it owns, that cache's shape and beam reordering."""

    config: Any  # ``n_positions``: the longest prompt + generated tokens the model takes
    output: torch.nn.Linear  # the LM head: its weight's device is where inputs go

    def __call__(self, tokens: Tensor, start: int, pad: Tensor, last_only: bool = ...) -> Tensor: ...

    def cache_shape(self) -> tuple[int, int] | None: ...

    def reorder_cache(self, rows: Tensor, start: int, end: int) -> None: ...

# HF's stand-in for "impossible" in beam scores; arithmetic with it must match HF's to rank the same way
_NEG = -1.0e9


@dataclass(frozen=True)
class GenerationConfig:
    """The MLPerf closed-division settings by default; ``num_beams=1`` is greedy (open division, debugging)."""

    num_beams: int = 4
    min_new_tokens: int = 30
    max_new_tokens: int = 128
    early_stopping: bool | str = True
    length_penalty: float = 1.0
    eos_token_id: int = 50256
    pad_token_id: int = 50256
    more_eos_token_ids: tuple[int, ...] = ()  # greedy only: other tokens that end a row (Llama 3.1 has three)

    def __post_init__(self) -> None:
        if self.num_beams < 1 or self.max_new_tokens < 1 or self.min_new_tokens < 0:
            raise ValueError(f"need num_beams >= 1, max_new_tokens >= 1, min_new_tokens >= 0: {self}")
        if self.early_stopping not in (True, False, "never"):
            raise ValueError(f"early_stopping must be True, False or 'never', not {self.early_stopping!r}")
        if self.more_eos_token_ids and self.num_beams != 1:
            raise ValueError("more_eos_token_ids is for greedy decoding (num_beams=1)")

    @property
    def eos_token_ids(self) -> list[int]:
        """Every token that ends a row, ``eos_token_id`` first."""
        return [self.eos_token_id, *self.more_eos_token_ids]


def cache_shape(prompt_lengths: Sequence[int], config: GenerationConfig) -> tuple[int, int]:
    """The (rows, columns) of KV cache ``generate`` needs for these prompts: pass them to ``setup_caches``."""
    return len(prompt_lengths) * config.num_beams, max(prompt_lengths) + config.max_new_tokens - 1


def left_pad(prompts: Sequence[Tensor], pad_token_id: int) -> tuple[Tensor, Tensor]:
    """``tokens [B, L]`` with each prompt right-aligned, and ``pad [B]``, each row's count of padding columns."""
    width = max(len(p) for p in prompts)
    tokens = torch.full((len(prompts), width), pad_token_id, dtype=torch.long)
    for row, prompt in enumerate(prompts):
        tokens[row, width - len(prompt) :] = prompt
    return tokens, torch.tensor([width - len(p) for p in prompts], dtype=torch.long)


@torch.inference_mode()
def generate(
    model: CausalLM,
    prompts: Sequence[Sequence[int] | np.ndarray | Tensor] | np.ndarray,
    config: GenerationConfig = GenerationConfig(),
    lengths: Sequence[int] | None = None,
) -> list[np.ndarray]:
    """New tokens (int32, prompt excluded, final EOS included) for each prompt, as HF ``generate`` returns them.

    ``prompts`` are 1-D token arrays, or rows of a 2-D array of which ``lengths[i]`` leading tokens are prompt i.
    The model's caches must hold ``cache_shape(lengths, config)``; they are reused batch after batch, never cleared
    (stale columns are never read).
    """
    # int64 copies: the prompts may be read-only views of the data set, which torch warns about sharing
    rows = [torch.as_tensor(np.array(p, dtype=np.int64)).reshape(-1) for p in prompts]
    if lengths is not None:
        rows = [r[:n] for r, n in zip(rows, lengths, strict=True)]
    if not rows or min(len(r) for r in rows) == 0:
        raise ValueError("generate needs at least one prompt and no empty prompt")
    longest = max(len(r) for r in rows)
    if longest + config.max_new_tokens - 1 > model.config.n_positions:
        raise ValueError(
            f"a {longest}-token prompt + {config.max_new_tokens} new tokens exceeds "
            f"{model.config.n_positions} positions"
        )
    need, have = cache_shape([len(r) for r in rows], config), model.cache_shape()
    if have is None or need[0] > have[0] or need[1] > have[1]:
        raise ValueError(
            f"this batch needs KV caches of at least {need} (rows, columns), the model has {have}: "
            f"call model.setup_caches({need[0]}, {need[1]}) or larger"
        )
    device = model.output.weight.device
    tokens, pad = (t.to(device) for t in left_pad(rows, config.pad_token_id))
    search = _greedy if config.num_beams == 1 else _beam_search
    return [out.astype(np.int32) for out in search(model, tokens, pad, config)]


def _greedy(model: CausalLM, tokens: Tensor, pad: Tensor, cfg: GenerationConfig) -> list[np.ndarray]:
    """HF's greedy ``_sample``: argmax of the logits (EOS barred before ``min_new_tokens``); a row stops at EOS."""
    batch, width = tokens.shape
    eos = torch.tensor(cfg.eos_token_ids, device=tokens.device)
    out = torch.full((batch, cfg.max_new_tokens), cfg.pad_token_id, dtype=torch.long, device=tokens.device)
    lengths = torch.full((batch,), cfg.max_new_tokens, dtype=torch.long, device=tokens.device)
    finished = torch.zeros(batch, dtype=torch.bool, device=tokens.device)
    logits = model(tokens, 0, pad, last_only=True).float()
    for step in range(cfg.max_new_tokens):
        if step < cfg.min_new_tokens:
            logits[:, eos] = -torch.inf
        next_tokens = torch.where(finished, cfg.pad_token_id, logits.argmax(dim=-1))
        out[:, step] = next_tokens
        ends = torch.isin(next_tokens, eos) & ~finished
        lengths[ends] = step + 1
        finished |= ends
        if step == cfg.max_new_tokens - 1 or bool(finished.all()):
            break
        logits = model(next_tokens[:, None], width + step, pad, last_only=True).float()
    return [row[:n].cpu().numpy() for row, n in zip(out, lengths.tolist(), strict=True)]


def _beam_search(model: CausalLM, tokens: Tensor, pad: Tensor, cfg: GenerationConfig) -> list[np.ndarray]:
    """HF 5.x ``_beam_search`` on a batch; every tensor below is [samples, beams or candidates, ...]."""
    batch, width = tokens.shape
    beams, cands, max_new = cfg.num_beams, 2 * cfg.num_beams, cfg.max_new_tokens
    dev = tokens.device

    # Prefill each sample once, then copy its cache rows to its beams (they share the prompt).
    logits = model(tokens, 0, pad, last_only=True).float().repeat_interleave(beams, dim=0)
    model.reorder_cache(torch.arange(batch, device=dev).repeat_interleave(beams), 0, width)
    pad = pad.repeat_interleave(beams)
    row_offset = torch.arange(batch, device=dev)[:, None] * beams

    run_scores = torch.full((batch, beams), _NEG, device=dev)
    run_scores[:, 0] = 0.0
    run_tokens = torch.full((batch, beams, max_new), cfg.pad_token_id, dtype=torch.long, device=dev)
    done_scores = torch.full((batch, beams), _NEG, device=dev)
    done_tokens = run_tokens.clone()
    done_lengths = torch.zeros((batch, beams), dtype=torch.long, device=dev)
    done = torch.zeros((batch, beams), dtype=torch.bool, device=dev)  # HF: is_sent_finished
    improvable = torch.ones((batch, 1), dtype=torch.bool, device=dev)  # HF: is_early_stop_heuristic_unsatisfied
    top_ranks = (torch.arange(cands, device=dev) < beams)[None, :]

    for step in range(max_new):
        log_probs = F.log_softmax(logits, dim=-1)
        if step < cfg.min_new_tokens:
            log_probs[:, cfg.eos_token_id] = -torch.inf
        # HF takes the top `cands` of all beams * vocab sums; each beam's top `cands` tokens contain them, so we
        # add beam scores to those only (the same float additions, a fraction of the work).
        beam_best, beam_best_token = torch.topk(log_probs, k=cands)
        totals = (beam_best.view(batch, beams, cands) + run_scores[:, :, None]).view(batch, beams * cands)
        cand_scores, flat = torch.topk(totals, k=cands)
        parent, cand_token = flat // cands, beam_best_token.view(batch, beams * cands).gather(1, flat)
        cand_tokens = _take(run_tokens, parent)
        cand_tokens[:, :, step] = cand_token
        ends = cand_token == cfg.eos_token_id
        if step == max_new - 1:
            ends = torch.ones_like(ends)  # HF's MaxLengthCriteria: every candidate is finished

        # Finished hypotheses: merge this step's (top-ranked, length-normalised) with the kept ones, keep the best.
        new_scores = cand_scores / ((step + 1) ** cfg.length_penalty)
        full = done.all(dim=-1, keepdim=True) & (cfg.early_stopping is True)
        new_scores = new_scores + full.to(torch.float32) * _NEG
        new_scores = new_scores + (~improvable).to(torch.float32) * _NEG
        finishing = ends & top_ranks
        new_scores = new_scores + (~finishing) * _NEG
        keep = torch.topk(torch.cat((done_scores, new_scores), dim=1), k=beams).indices
        done_scores = torch.cat((done_scores, new_scores), dim=1).gather(1, keep)
        done_tokens = _take(torch.cat((done_tokens, cand_tokens), dim=1), keep)
        done_lengths = torch.cat((done_lengths, torch.full_like(cand_token, step + 1)), dim=1).gather(1, keep)
        done = torch.cat((done, finishing), dim=1).gather(1, keep)

        # Running beams: the best unfinished candidates.
        running = cand_scores + ends.to(torch.float32) * _NEG
        keep = torch.topk(running, k=beams).indices
        run_scores = running.gather(1, keep)
        run_tokens = _take(cand_tokens, keep)
        next_parent, next_token = parent.gather(1, keep), cand_token.gather(1, keep)

        # Can any sample still change its result?
        if cfg.early_stopping == "never" and cfg.length_penalty > 0.0:
            best_length = max_new
        else:
            best_length = step + 1
        best_possible = run_scores[:, :1] / (best_length**cfg.length_penalty)
        worst_done = torch.where(done, done_scores.min(dim=1, keepdim=True).values, _NEG)
        improvable = improvable & (best_possible > worst_done).any(dim=-1, keepdim=True)
        if step == max_new - 1 or not bool(improvable.any()) or (cfg.early_stopping is True and bool(done.all())):
            break

        # Beams moved: their generated columns follow them (prompt columns are the same for all of a sample's beams).
        model.reorder_cache((next_parent + row_offset).view(-1), width, width + step)
        logits = model(next_token.view(-1, 1), width + step, pad, last_only=True).float()

    best_tokens, best_lengths = done_tokens[:, 0].cpu().numpy(), done_lengths[:, 0].tolist()
    return [row[:n] for row, n in zip(best_tokens, best_lengths, strict=True)]


def _take(tokens: Tensor, index: Tensor) -> Tensor:
    """``tokens[b, index[b, j], :]`` for every b, j: the histories of the chosen beams."""
    return tokens.gather(1, index[:, :, None].expand(-1, -1, tokens.shape[-1]))
