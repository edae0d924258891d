"""One beam-search step for every slot at once, each slot at its own step.

The arithmetic is that of ``code/llm/generation.py::_beam_search`` (HF 5.x ``_beam_search`` with
``early_stopping=True``), with the step number a per-slot tensor instead of one Python int, so samples that joined
at different times advance together in one set of kernels (and one CUDA graph). Every update is masked by
``active``: a free slot's state stays as it is until ``reset`` fills it for a new sample.

All state lives in preallocated tensors that are updated in place (the CUDA graph of a step replays on fixed
addresses); ``BeamState.step`` allocates temporaries only.

One beam (``num_beams=1``) is greedy decoding, as ``code/llm/generation.py::_greedy`` runs it: each step takes the
argmax of the logits (every EOS id barred before ``min_new_tokens``), and a sample ends at any of its EOS ids
(``GenerationConfig.eos_token_ids``: Llama 3.1 has three) or at ``max_new_tokens``. It keeps its tokens in
``done_tokens[:, 0]`` as it goes, so ``result`` and the engine read it as a beam search's best hypothesis.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from code.llm.generation import GenerationConfig

NEG = -1.0e9  # HF's stand-in for "impossible": the same constant so ties and rankings come out the same


class BeamState:
    """Beam-search bookkeeping of ``slots`` samples of ``config.num_beams`` beams each."""

    def __init__(self, slots: int, config: GenerationConfig, device: torch.device) -> None:
        if config.early_stopping is not True:
            raise ValueError("the in-flight engine implements early_stopping=True (the MLPerf setting) only")
        self.config = config
        beams, max_new = config.num_beams, config.max_new_tokens
        long = dict(dtype=torch.long, device=device)
        flt = dict(dtype=torch.float32, device=device)
        self.active = torch.zeros(slots, dtype=torch.bool, device=device)
        self.finished = torch.zeros(slots, dtype=torch.bool, device=device)  # set by the step that ends a sample
        self.step_no = torch.zeros(slots, **long)  # tokens chosen so far
        # Synthetic runs only: a sample's output is exactly this long, its final EOS included (0: the model decides)
        self.forced_length = torch.zeros(slots, **long)
        self.run_scores = torch.full((slots, beams), NEG, **flt)
        self.run_tokens = torch.full((slots, beams, max_new), config.pad_token_id, **long)
        self.done_scores = torch.full((slots, beams), NEG, **flt)
        self.done_tokens = torch.full((slots, beams, max_new), config.pad_token_id, **long)
        self.done_lengths = torch.zeros((slots, beams), **long)
        self.done = torch.zeros((slots, beams), dtype=torch.bool, device=device)
        self.improvable = torch.ones((slots, 1), dtype=torch.bool, device=device)
        # Ancestry: the beam row whose decode step wrote token t of beam b's history (see kv_cache.py).
        self.ancestry = torch.zeros((slots, beams, max_new), dtype=torch.int32, device=device)
        # Outputs of the last step, inputs of the next decode: each beam's newest token and its index in the
        # generated rows.
        self.next_tokens = torch.full((slots, beams), config.pad_token_id, **long)
        self._beam_ids = torch.arange(beams, dtype=torch.int32, device=device)
        self._eos_ids = torch.tensor(config.eos_token_ids, dtype=torch.long, device=device)
        self._top_ranks = (torch.arange(2 * beams, device=device) < beams)[None, :]

    def reset(self, slots: Tensor, forced_length: Tensor | None = None) -> None:
        """Start new samples in ``slots`` (int64 indices): only beam 0 live, nothing finished. ``forced_length``
        (per slot, 0 for none): EOS is every beam's only choice at that length and no choice before it."""
        self.active[slots] = True
        self.forced_length[slots] = 0 if forced_length is None else forced_length
        self.finished[slots] = False
        self.step_no[slots] = 0
        scores = torch.full((len(slots), self.config.num_beams), NEG, device=self.run_scores.device)
        scores[:, 0] = 0.0
        self.run_scores[slots] = scores
        self.done_scores[slots] = NEG
        self.done_lengths[slots] = 0
        self.done[slots] = False
        self.improvable[slots] = True
        self.run_tokens[slots] = self.config.pad_token_id
        self.done_tokens[slots] = self.config.pad_token_id

    def release(self, slots: Tensor) -> None:
        """Free ``slots`` after their results were read; a free slot's decode rows then read one generated
        column, not its last sample's history."""
        self.active[slots] = False
        self.finished[slots] = False
        self.step_no[slots] = 0

    def result(self, slot: int) -> Tensor:
        """The best finished hypothesis of a finished slot: its new tokens, final EOS included (on the device)."""
        return self.done_tokens[slot, 0, : self.done_lengths[slot, 0]]

    def step(self, logits: Tensor) -> None:
        """Choose every active slot's next tokens from ``logits [slots * beams, vocab]`` (float32), update the
        finished hypotheses, the ancestry and ``finished``; ``step_no`` advances for active slots."""
        if self.config.num_beams == 1:
            self._greedy_step(logits)
            return
        cfg = self.config
        slots, beams = self.run_scores.shape
        cands, max_new = 2 * beams, cfg.max_new_tokens
        step = self.step_no
        act = self.active

        log_probs = F.log_softmax(logits, dim=-1)
        # Before min_new_tokens the EOS log-prob is -inf (after the log-softmax, as HF's processor runs).
        # A forced slot never chooses EOS before its length and nothing else at it.
        forced = self.forced_length > 0
        at_length = forced & (step + 1 == self.forced_length)
        no_eos = (step < cfg.min_new_tokens) | (forced & ~at_length)
        eos = log_probs[:, cfg.eos_token_id]
        log_probs[:, cfg.eos_token_id] = torch.where(_per_row(no_eos, beams), -torch.inf, eos)
        eos_only = _per_row(at_length, beams)
        log_probs.masked_fill_(eos_only[:, None], -torch.inf)
        log_probs[:, cfg.eos_token_id] = torch.where(eos_only, 0.0, log_probs[:, cfg.eos_token_id])
        beam_best, beam_best_token = torch.topk(log_probs, k=cands)
        totals = (beam_best.view(slots, beams, cands) + self.run_scores[:, :, None]).view(slots, beams * cands)
        cand_scores, flat = torch.topk(totals, k=cands)
        parent, cand_token = flat // cands, beam_best_token.view(slots, beams * cands).gather(1, flat)
        cand_tokens = _take(self.run_tokens, parent)
        column = step.clamp(max=max_new - 1)[:, None, None].expand(-1, cands, 1)
        cand_tokens.scatter_(2, column, cand_token[:, :, None])
        last = (step == max_new - 1)[:, None]
        ends = (cand_token == cfg.eos_token_id) | last

        # Finished hypotheses: this step's top-ranked endings, length-normalised, merged with the kept ones.
        lengths = step + 1
        norm = (lengths.double() ** cfg.length_penalty).float()[:, None]
        new_scores = cand_scores / norm
        full = self.done.all(dim=-1, keepdim=True)
        new_scores = new_scores + full.to(torch.float32) * NEG
        new_scores = new_scores + (~self.improvable).to(torch.float32) * NEG
        finishing = ends & self._top_ranks
        new_scores = new_scores + (~finishing) * NEG
        merged = torch.cat((self.done_scores, new_scores), dim=1)
        keep = torch.topk(merged, k=beams).indices
        done_scores = merged.gather(1, keep)
        done_tokens = _take(torch.cat((self.done_tokens, cand_tokens), dim=1), keep)
        done_lengths = torch.cat((self.done_lengths, lengths[:, None].expand(-1, cands)), dim=1).gather(1, keep)
        done = torch.cat((self.done, finishing), dim=1).gather(1, keep)

        # Running beams: the best unfinished candidates.
        running = cand_scores + ends.to(torch.float32) * NEG
        keep = torch.topk(running, k=beams).indices
        run_scores = running.gather(1, keep)
        run_tokens = _take(cand_tokens, keep)
        next_parent, next_token = parent.gather(1, keep), cand_token.gather(1, keep)

        best_possible = run_scores[:, :1] / norm
        worst_done = torch.where(done, done_scores.min(dim=1, keepdim=True).values, NEG)
        improvable = self.improvable & (best_possible > worst_done).any(dim=-1, keepdim=True)
        finished = last[:, 0] | ~improvable[:, 0] | done.all(dim=-1)

        # Beam b's history is its parent's, plus the token the next decode writes in row b at column `step`.
        ancestry = _take(self.ancestry, next_parent)
        ancestry.scatter_(2, column[:, :beams], self._beam_ids[None, :, None].expand(slots, -1, 1))

        a1, a2, a3 = act[:, None], act[:, None, None], act
        self.run_scores.copy_(torch.where(a1, run_scores, self.run_scores))
        self.run_tokens.copy_(torch.where(a2, run_tokens, self.run_tokens))
        self.done_scores.copy_(torch.where(a1, done_scores, self.done_scores))
        self.done_tokens.copy_(torch.where(a2, done_tokens, self.done_tokens))
        self.done_lengths.copy_(torch.where(a1, done_lengths, self.done_lengths))
        self.done.copy_(torch.where(a1, done, self.done))
        self.improvable.copy_(torch.where(a1, improvable, self.improvable))
        self.ancestry.copy_(torch.where(a2, ancestry, self.ancestry))
        self.next_tokens.copy_(torch.where(a1, next_token, self.next_tokens))
        self.finished.copy_(a3 & finished)
        self.step_no.add_(a3.long())


    def _greedy_step(self, logits: Tensor) -> None:
        """One beam: the argmax of ``logits [slots, vocab]``, the EOS ids barred before ``min_new_tokens`` (and, for
        a forced length, before it; at it EOS is the choice). The ancestry stays all zeros: row s's history is its
        own."""
        cfg = self.config
        step, act = self.step_no, self.active
        max_new = cfg.max_new_tokens
        forced = self.forced_length > 0
        at_length = forced & (step + 1 == self.forced_length)
        no_eos = (step < cfg.min_new_tokens) | (forced & ~at_length)
        scores = logits.clone()
        scores[:, self._eos_ids] = torch.where(no_eos[:, None], -torch.inf, scores[:, self._eos_ids])
        token = torch.where(at_length, cfg.eos_token_id, scores.argmax(dim=-1))
        ends = (token[:, None] == self._eos_ids[None, :]).any(dim=-1) | (step == max_new - 1)
        column = step.clamp(max=max_new - 1)[:, None]
        done_tokens = self.done_tokens[:, 0].scatter(1, column, token[:, None])
        self.done_tokens[:, 0].copy_(torch.where(act[:, None], done_tokens, self.done_tokens[:, 0]))
        self.done_lengths[:, 0].copy_(torch.where(act, step + 1, self.done_lengths[:, 0]))
        self.next_tokens[:, 0].copy_(torch.where(act, token, self.next_tokens[:, 0]))
        self.finished.copy_(act & ends)
        self.step_no.add_(act.long())


def _per_row(per_slot: Tensor, beams: int) -> Tensor:
    """A per-slot value repeated for each of the slot's beam rows (``[slots]`` -> ``[slots * beams]``)."""
    return per_slot[:, None].expand(-1, beams).reshape(-1)


def _take(tokens: Tensor, index: Tensor) -> Tensor:
    """``tokens[s, index[s, j], :]`` for every s, j: the rows of the chosen beams."""
    return tokens.gather(1, index[:, :, None].expand(-1, -1, tokens.shape[-1]))
