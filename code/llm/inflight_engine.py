"""The in-flight batching loop: take samples, prefill them into free slots, step every slot, complete each sample
as soon as its search ends (beam search, or greedy decoding as beam search of one beam).

The loop knows nothing of the model: it runs any ``EngineModel`` (GPT-J's ``code/gptj/inflight/layers.py``,
Llama 3.1's ``code/llama31/inflight_model.py``), which says its cache's shape and runs prefill and decode over the
paged KV cache (``code/llm/kv_cache.py``).

One iteration: (1) take as many new samples as there are free slots (waiting only when nothing is running);
(2) admit what fits: assign pages, prefill prompts in passes of at most ``prefill_tokens`` tokens, which leaves
each new slot's first logits where the step reads them; (3) one step for all slots: a beam-search step (new
tokens, finished hypotheses) then a decode forward of every beam row, replayed as one CUDA graph on the GPU;
(4) report the first tokens of the slots admitted in (2), when asked to, and read which slots finished (the step's
host synchronisation) and complete them.

Greedy decoding (one beam) knows a sample's first token after the step that follows its prompt, so ``serve`` can
report it then (``first_tokens``), as LoadGen's time to first token measures; beam search knows its tokens only at
the end, so its first tokens go with the responses.

``serve`` is driven by two callables, so the C++ core's session (``take``/``complete``) and a plain in-memory
queue (``generate``) run the same loop.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

import numpy as np
import torch
from torch import Tensor

from code.llm.backend_rules import no_engine
from code.llm.beam_search import BeamState
from code.llm.calibration_engine import EngineSpec, Recipe, engine_key, ensure_engine, load_calibration
from code.llm.checkpoint import model_dtype
from code.llm.generation import GenerationConfig
from code.llm.kv_cache import CacheShape, KVCache
from code.llm.memory_plan import GIB, KV_CACHE_DTYPES, PAGE_SIZE, PRECISIONS, RESERVE_SHARE, prompt_pool_pages
from code.llm.paged_attention import decode_launch_for, head_groups, kernel_launch
from code.mlperf.devices import allocatable_gpu_bytes, placed_on, usable_gpu_bytes
from code.numerics.fp8 import E4M3

if TYPE_CHECKING:
    from code.config.resolved import ResolvedConfig
    from code.mlperf.benchmarks import EngineReport

Take = Callable[[int, float], "tuple[np.ndarray, np.ndarray] | None"]
Complete = Callable[[np.ndarray, list[np.ndarray]], None]
FirstTokens = Callable[[np.ndarray, np.ndarray], None]  # response ids (uint64), one first token id each (int32)
ForcedLengthOf = Callable[[int], int]  # synthetic runs: a sample's forced output length (0: the model decides)

IDLE_WAIT_S = 0.05  # how long take waits when nothing is running (keeps an idle Server loop off the CPU)


def sm_count(device: torch.device) -> int:
    """The device's SMs (what the decode split rule fills); 0 off CUDA, where no kernel is launched."""
    return torch.cuda.get_device_properties(device).multi_processor_count if device.type == "cuda" else 0


class EngineModel(Protocol):
    """What the engine asks of a model: its sizes, its cache's shape, and two forwards over the paged cache."""

    config: Any  # ``n_positions`` (the longest prompt + new tokens) and ``vocab_size`` (the logits' width)
    memory_plan: str  # where a too-small GPU's error sends the user, e.g. "code/gptj/memory_plan.py: gptj_memory_plan"
    # the Triton decode kernel's launch tuned at many slots (``code.llm.paged_attention.DECODE_LAUNCH``'s keys), or
    # the CUDA kernel's where it serves the cache (``kernel_launch``): the engine raises its SPLITS for few slots
    # (``decode_launch_for``), never lowers them
    decode_launch: Mapping[str, int]
    query_heads: int  # attention's query heads: with the cache's key/value heads, the kernel's shape
    typical_prompt_tokens: int  # the data set's mean prompt: the split rule gives each split a block of one

    @property
    def device(self) -> torch.device: ...

    @property
    def dtype(self) -> torch.dtype: ...  # what keys and values are computed in

    def cache_shape(self, slots: int, beams: int, max_new_tokens: int, page_size: int,
                    max_prompt_length: int) -> CacheShape:
        """The KV cache's shape (layers, key/value heads, head size) before its pool is sized (``pages`` 1)."""
        ...

    def prefill(self, prompts: list[Tensor], slots: list[int], cache: KVCache) -> Tensor:
        """Whole prompts (int64 on the device) into the slots' pages; float32 logits ``[prompts, vocab]`` of each
        prompt's last token."""
        ...

    def decode(self, tokens: Tensor, cache: KVCache, ancestry: Tensor, gen_count: Tensor,
               launch: Mapping[str, int] | None = None) -> Tensor:
        """One token per beam row; float32 logits ``[slots * beams, vocab]``, without host synchronisation (it is
        captured in a CUDA graph). ``launch``: the decode kernel's (None: the model's ``decode_launch``)."""
        ...


class KvMagnitudes(Protocol):
    """The calibration's largest key and value magnitudes per layer (an FP8 cache's scales)."""

    k: list[float]
    v: list[float]


@dataclass(frozen=True)
class EngineOptions:
    slots: int  # samples in flight at once (NVIDIA's gpu_batch_size for in-flight batching)
    max_prompt_length: int
    page_size: int = PAGE_SIZE  # tokens per prompt page; the decode kernel reads one page per iteration
    kv_pages: int = 0  # prompt pages in the pool; 0: what memory allows (CUDA), all slots at the longest (CPU)
    # CUDA: the GPU memory this process may use; 0: ``usable_gpu_bytes`` (the GPU's total, or less under a
    # per-process memory fraction, as a stand-in for a smaller GPU sets)
    memory_bytes: int = 0
    kv_dtype: torch.dtype | None = None  # what the KV cache stores: None (the model's dtype) or torch.float8_e4m3fn
    prefill_tokens: int = 16384  # most prompt tokens in one prefill pass
    cuda_graphs: bool = True
    # CUDA: memory left beside the KV pool for a prefill pass's activations, the graph pool and fragmentation, as a
    # share of memory_bytes (code/llm/memory_plan.py: reserve_bytes)
    memory_reserve_share: float = RESERVE_SHARE

    def __post_init__(self) -> None:
        for name in ("slots", "max_prompt_length", "page_size", "prefill_tokens"):
            if getattr(self, name) < 1:
                raise ValueError(f"EngineOptions.{name} must be >= 1, not {getattr(self, name)}")
        for name in ("kv_pages", "memory_bytes"):
            if getattr(self, name) < 0:
                raise ValueError(f"EngineOptions.{name} must be >= 0, not {getattr(self, name)}")


@dataclass
class EngineStats:
    steps: int = 0
    slot_steps: int = 0  # sum over steps of the slots running in it
    prefill_passes: int = 0
    prefill_tokens: int = 0
    completed: int = 0
    generated_tokens: int = 0
    seconds: float = 0.0
    kv_pages: int = 0

    def as_dict(self) -> dict:
        return {"steps": self.steps, "mean_running_slots": round(self.slot_steps / max(self.steps, 1), 1),
                "prefill_passes": self.prefill_passes, "prefill_tokens": self.prefill_tokens,
                "completed": self.completed, "generated_tokens": self.generated_tokens,
                # every sample's decode steps, summed (once all are done: slot_steps): beam search may run past the
                # length of the answer it returns, and each step costs the same whatever is returned
                "decode_steps": self.slot_steps,
                "seconds": round(self.seconds, 3), "kv_pages": self.kv_pages}


class InflightEngine:
    """``kv_amax``: the calibration's key and value magnitudes, which an FP8 cache needs for its scales (fixed
    before the step is captured: the kernels take them as constants).

    Every step, eager or the CUDA graph, runs ``decode_launch``: the model's launch with SPLITS for the engine's
    ``slots`` on this GPU (``decode_launch_for``), since the graph's grid is fixed at capture for that many slots.
    ``decode_launch`` given: that launch instead (the GPU checks time the model's own against the rule's)."""

    def __init__(self, model: EngineModel, generation: GenerationConfig, options: EngineOptions,
                 kv_amax: KvMagnitudes | None = None, decode_launch: Mapping[str, int] | None = None) -> None:
        cfg = model.config
        if options.max_prompt_length + generation.max_new_tokens - 1 > cfg.n_positions:
            raise ValueError(f"prompts of {options.max_prompt_length} tokens + {generation.max_new_tokens} new "
                             f"tokens exceed the model's {cfg.n_positions} positions")
        self.model, self.generation, self.options = model, generation, options
        device = model.device
        shape = model.cache_shape(options.slots, generation.num_beams, generation.max_new_tokens, options.page_size,
                                  options.max_prompt_length)
        self.beams = BeamState(options.slots, generation, device)
        self.logits = torch.zeros((options.slots * generation.num_beams, cfg.vocab_size), dtype=torch.float32,
                                  device=device)
        pages = options.kv_pages or self._pages_that_fit(shape)
        self.cache = KVCache(CacheShape(**{**shape.__dict__, "pages": pages}), model.dtype, device, options.kv_dtype)
        if self.cache.is_fp8:
            if kv_amax is None:
                raise ValueError("an FP8 KV cache needs the calibration's key and value magnitudes (kv_amax)")
            self.cache.set_scales(kv_amax.k, kv_amax.v)
        self.stats = EngineStats(kv_pages=pages)
        self.decode_launch = dict(decode_launch) if decode_launch is not None else self._decode_launch()
        self._graph: torch.cuda.CUDAGraph | None = None
        if device.type == "cuda":  # CPU passes compile nothing
            self._warm_prefill()
        if device.type == "cuda" and options.cuda_graphs:
            self._capture()

    def _decode_launch(self) -> dict[str, int]:
        """The split rule's launch for this engine's slots: every step's grid holds all ``slots`` (free ones read
        one token), so the graph serves that many, whatever runs."""
        base = kernel_launch(self.model.decode_launch, self.cache, self.model.device,
                             group=self.model.query_heads // self.cache.shape.heads, dtype=self.model.dtype)
        return decode_launch_for(self.options.slots, head_groups(base, self.cache),
                                 sm_count(self.model.device), base,
                                 prompt_tokens=min(self.model.typical_prompt_tokens, self.options.max_prompt_length),
                                 page_size=self.options.page_size)

    def _warm_prefill(self) -> None:
        """One short prompt pass, discarded: Triton compiles the prompt-pass kernels and cuBLAS loads its GEMMs
        now rather than in the first timed pass. Its keys and values land in pages that go back to the pool
        (finite values, overwritten or masked later); the pool's order of free pages is as before."""
        length = min(self.options.page_size + 1, self.options.max_prompt_length, self.options.prefill_tokens)
        self.cache.assign(0, length)
        self.model.prefill([torch.zeros(length, dtype=torch.long, device=self.model.device)], [0], self.cache)
        self.cache.release(0)

    def _pages_that_fit(self, shape: CacheShape) -> int:
        """CPU: every slot at the longest prompt. CUDA: ``prompt_pool_pages`` of what this process can still
        allocate (the weights and per-slot state are in place), within ``memory_bytes``: the same rule the model's
        memory plan (``code/llm/memory_plan.py``: ``largest_fit``) predicts slots with. Not
        ``torch.cuda.mem_get_info`` alone, which ignores a per-process memory fraction (a stand-in for a smaller GPU)
        and PyTorch's cached blocks."""
        if self.model.device.type != "cuda":
            return shape.slots * shape.pages_per_slot
        device = self.model.device
        element = (self.options.kv_dtype or self.model.dtype).itemsize
        memory = self.options.memory_bytes or usable_gpu_bytes(device)
        room = allocatable_gpu_bytes(device, memory)
        pages = prompt_pool_pages(room, memory, shape, element, self.options.memory_reserve_share)
        if pages < shape.pages_per_slot:
            raise ValueError(f"{room / GIB:.1f} GiB left on the GPU (of {memory / GIB:.1f} GiB usable) is too little "
                             f"for {shape.slots} slots ({shape.generated_bytes(element) / GIB:.1f} GiB of generated "
                             "rows), the reserve and one longest prompt: lower gpu_batch_size "
                             f"({self.model.memory_plan} says how many fit)")
        return pages

    # -- one step ------------------------------------------------------------------------------------------------
    def _step_eager(self) -> None:
        self.beams.step(self.logits)
        logits = self.model.decode(self.beams.next_tokens.view(-1), self.cache, self.beams.ancestry,
                                   self.beams.step_no, self.decode_launch)
        self.logits.copy_(logits)

    def _capture(self) -> None:
        """Warm up (Triton compiles, cuBLAS picks kernels) with every slot free, then capture one step. Both on a
        stream of the model's own GPU, with that GPU current: PyTorch's default capture stream is one per process,
        made on whichever GPU asked first, and Triton launches on the current GPU."""
        device = self.model.device
        with torch.cuda.device(device):
            stream = torch.cuda.Stream(device)
            stream.wait_stream(torch.cuda.current_stream(device))
            with torch.inference_mode(), torch.cuda.stream(stream):
                for _ in range(2):
                    self._step_eager()
            torch.cuda.current_stream(device).wait_stream(stream)
            self._graph = torch.cuda.CUDAGraph()
            with torch.inference_mode(), torch.cuda.graph(self._graph, stream=stream):
                self._step_eager()
            torch.cuda.synchronize(device)

    def _step(self) -> None:
        if self._graph is not None:
            self._graph.replay()
        else:
            with torch.inference_mode():
                self._step_eager()

    # -- admission -----------------------------------------------------------------------------------------------
    def _prefill(self, batch: list[tuple[int, np.ndarray, int]]) -> None:
        slots = [slot for slot, _, _ in batch]
        device = self.model.device
        prompts = [torch.as_tensor(np.asarray(p, dtype=np.int64)).to(device, non_blocking=True) for _, p, _ in batch]
        logits = self.model.prefill(prompts, slots, self.cache)
        beams = self.generation.num_beams
        index = torch.tensor(slots, dtype=torch.long, device=device)
        rows = (index[:, None] * beams + torch.arange(beams, device=device)).view(-1)
        with torch.inference_mode():
            self.logits[rows] = logits.repeat_interleave(beams, dim=0)
            self.cache.set_tables(slots, [len(p) for p in prompts])
            self.beams.reset(index, torch.tensor([n for _, _, n in batch], device=device))
        self.stats.prefill_passes += 1
        self.stats.prefill_tokens += sum(len(p) for p in prompts)

    def _admit(self, pending: deque, free_slots: list[int], running: dict[int, int]) -> list[int]:
        """Prefills what fits; the slots admitted."""
        admitted: list[int] = []
        batch: list[tuple[int, np.ndarray, int]] = []
        tokens = 0
        while pending and free_slots:
            response_id, prompt, forced_length = pending[0]
            if self.cache.pages_for(len(prompt)) > self.cache.free_pages:
                break  # waits for pages freed by completions
            if batch and tokens + len(prompt) > self.options.prefill_tokens:
                self._prefill(batch)
                batch, tokens = [], 0
            pending.popleft()
            slot = free_slots.pop()
            self.cache.assign(slot, len(prompt))
            running[slot] = response_id
            batch.append((slot, prompt, forced_length))
            admitted.append(slot)
            tokens += len(prompt)
        if batch:
            self._prefill(batch)
        return admitted

    def _after_step(self, running: dict[int, int], free_slots: list[int], complete: Complete, admitted: list[int],
                    first_tokens: FirstTokens | None) -> None:
        """Report the first tokens of ``admitted`` through ``first_tokens`` where given (the step that just ran chose
        them: greedy, ``done_tokens[:, 0, 0]``), then complete the finished samples. Both read ``done_tokens``
        through one device-to-host copy of the rows they need: each copy waits for the GPU, one a step is enough."""
        reported = admitted if first_tokens is not None else []
        finished = self.beams.finished.nonzero().view(-1)
        if finished.numel() == 0 and not reported:
            return
        slots = finished.tolist()
        rows = torch.cat((finished, torch.tensor(reported, dtype=torch.long, device=finished.device))) if reported \
            else finished
        tokens = self.beams.done_tokens[rows, 0].to("cpu", torch.int32).numpy()
        if first_tokens is not None and reported:
            first_tokens(np.array([running[slot] for slot in reported], dtype=np.uint64),
                         np.ascontiguousarray(tokens[len(slots):, 0]))
        if not slots:
            return
        lengths = self.beams.done_lengths[finished, 0].tolist()
        outputs = [np.ascontiguousarray(row[:n]) for row, n in zip(tokens[:len(slots)], lengths, strict=True)]
        ids = np.array([running.pop(slot) for slot in slots], dtype=np.uint64)
        with torch.inference_mode():
            self.beams.release(finished)
            self.cache.clear_lengths(finished)
        for slot in slots:
            self.cache.release(slot)
        free_slots.extend(slots)
        self.stats.completed += len(slots)
        self.stats.generated_tokens += sum(lengths)
        complete(ids, outputs)

    # -- the loop ------------------------------------------------------------------------------------------------
    def serve(self, take: Take, complete: Complete, prompt_of: Callable[[int], np.ndarray],
              forced_length_of: ForcedLengthOf | None = None, first_tokens: FirstTokens | None = None) -> None:
        """Run until ``take`` returns None and every taken sample is completed. ``first_tokens``: greedy decoding
        reports each sample's first token through it before its completion (beam search does not: see above)."""
        if self.generation.num_beams != 1:
            first_tokens = None
        free_slots = list(range(self.options.slots - 1, -1, -1))
        running: dict[int, int] = {}  # slot -> response id
        pending: deque[tuple[int, np.ndarray, int]] = deque()  # taken, waiting for a slot or pages
        closed = False
        start = time.perf_counter()
        while True:
            room = len(free_slots) - len(pending)
            if not closed and room > 0:
                got = take(room, 0.0 if running or pending else IDLE_WAIT_S)
                if got is None:
                    closed = True
                else:
                    for response_id, index in zip(*(a.tolist() for a in got), strict=True):
                        prompt = np.asarray(prompt_of(index))
                        if len(prompt) > self.options.max_prompt_length:
                            raise ValueError(f"sample {index} has a {len(prompt)}-token prompt; the engine was "
                                             f"built for at most {self.options.max_prompt_length}")
                        forced = forced_length_of(index) if forced_length_of else 0
                        pending.append((response_id, prompt, forced))
            admitted = self._admit(pending, free_slots, running)
            if not running:
                if pending:
                    raise RuntimeError("a prompt does not fit the empty KV pool")  # ruled out by KVCache's check
                if closed:
                    break
                continue
            self._step()
            self.stats.steps += 1
            self.stats.slot_steps += len(running)
            self._after_step(running, free_slots, complete, admitted, first_tokens)
        self.stats.seconds += time.perf_counter() - start

    def generate(self, prompts: Sequence[np.ndarray], forced_lengths: Sequence[int] | None = None
                 ) -> list[np.ndarray]:
        """Every prompt's new tokens (int32, final EOS included), as ``code.llm.generation.generate`` returns
        them: the same loop over an in-memory queue. ``forced_lengths``: per prompt, 0 or a forced length."""
        queue = deque(range(len(prompts)))
        results: list[np.ndarray | None] = [None] * len(prompts)

        def take(limit: int, _timeout: float) -> tuple[np.ndarray, np.ndarray] | None:
            if not queue:
                return None
            chosen = [queue.popleft() for _ in range(min(limit, len(queue)))]
            return np.array(chosen, dtype=np.uint64), np.array(chosen, dtype=np.int64)

        def complete(ids: np.ndarray, outputs: list[np.ndarray]) -> None:
            for response_id, output in zip(ids.tolist(), outputs, strict=True):
                results[response_id] = output

        length_of = (lambda index: int(forced_lengths[index])) if forced_lengths is not None else None
        self.serve(take, complete, lambda index: prompts[index], length_of)
        return results  # type: ignore[return-value]


class EngineBackend:
    """What an in-flight backend gives the harness once its ``engine`` is built: a list of prompts run through the
    engine's loop (``run_batch``), the whole LoadGen test served from the C++ core's session (``serve``), and the
    engine's counters."""

    engine: InflightEngine

    def run_batch(self, sample_indices: np.ndarray, prompts: list[np.ndarray]) -> list[np.ndarray]:
        return self.engine.generate(prompts)

    def stats(self) -> dict:
        """The engine's counters (samples completed, tokens generated, ...) for the run's metadata.json."""
        return self.engine.stats.as_dict()

    def serve(self, session, prompt_of: Callable[[int], np.ndarray],  # noqa: ANN001 - the core's Session
              forced_length_of: ForcedLengthOf | None = None, stream_first_tokens: bool = False) -> None:
        """Run the whole LoadGen test: take samples from the C++ core's session, complete each when done;
        ``stream_first_tokens``: report each first token through the session as soon as it is known."""
        self.engine.serve(session.take, session.complete, prompt_of, forced_length_of,
                          session.first_tokens if stream_first_tokens else None)


@dataclass(frozen=True)
class CalibratedFields:
    """The options an in-flight backend adds to its benchmark's model options (a mixin of its ``InflightOptions``)."""

    kv_cache_dtype: str = "auto"  # auto (the model's dtype) | fp8
    fp8_fast_accum: bool = False  # precision fp8: cuBLASLt fast accumulation in the FP8 GEMMs
    cuda_graphs: bool = True  # replay each step as one CUDA graph
    engine_dir: Path | None = None  # FP8: the engine holding the calibration (code/llm/calibration_engine.py)
    engine_spec: EngineSpec | None = None  # FP8: the EngineSpec the run expects of it
    run_args: str | None = None  # makes an engine error's rebuild command copy-pasteable


class CalibratedBackend(EngineBackend):
    """An in-flight backend whose FP8 runs take static scales from the engine folder ``make generate_engines``
    calibrates (``code/llm/calibration_engine.py``); a run never recalibrates. GPT-J's and Llama 3.1's inflight
    backends are this one class: a subclass names its benchmark's ``Recipe`` (which names its ``EngineSpec``) and
    options, and its ``generation``."""

    recipe: ClassVar[Recipe]
    options_type: ClassVar[type]  # the benchmark's InflightOptions: CalibratedFields and its model's options

    @classmethod
    def engine_spec(cls, config: ResolvedConfig, context: Any) -> EngineSpec:  # noqa: ANN401 - a BackendContext
        return cls.recipe.spec_type(model_name=config["model_name"], precision=config["precision"],
                                    kv_cache_dtype=config["kv_cache_dtype"], checkpoint=context.checkpoint,
                                    seed=config["seed"])

    @classmethod
    def engine_dir(cls, config: ResolvedConfig, context: Any) -> Path | None:  # noqa: ANN401
        """``<engines_dir>/<key>/`` when the config needs an engine (FP8 GEMMs or cache), else None."""
        spec = cls.engine_spec(config, context)
        return context.engines_dir / engine_key(spec) if spec.needs_engine else None

    @classmethod
    def generate_engine(cls, config: ResolvedConfig, context: Any) -> EngineReport:  # noqa: ANN401
        """Calibrate an FP8 config's engine (reused while its manifest matches); a 16-bit config builds nothing."""
        spec = cls.engine_spec(config, context)
        path = cls.engine_dir(config, context)
        if path is None:
            return no_engine(config, cls.recipe.benchmark)
        built = ensure_engine(cls.recipe, spec, path, device=torch.device(context.device),
                              dtype=model_dtype(spec.precision))
        return {"engine": str(path), "built": "yes" if built else "no: reused, its manifest matches this run",
                "weights": context.checkpoint, "precision": spec.precision, "kv_cache_dtype": spec.kv_cache_dtype}

    @classmethod
    def options_from(cls, config: ResolvedConfig, context: Any) -> Any:  # noqa: ANN401 - the InflightOptions
        """The model's options (``options_type.model_fields``) and ``CalibratedFields``'."""
        path = cls.engine_dir(config, context)
        return cls.options_type(**cls.options_type.model_fields(config, context),
                                kv_cache_dtype=config["kv_cache_dtype"], fp8_fast_accum=config["fp8_fast_accum"],
                                cuda_graphs=config["cuda_graphs"], engine_dir=path,
                                engine_spec=cls.engine_spec(config, context) if path else None,
                                run_args=config.run_args())

    def generation(self, options: Any, model: Any) -> GenerationConfig:  # noqa: ANN401
        """The benchmark's decoding (beams, lengths, EOS ids) for ``model``."""
        raise NotImplementedError

    def __init__(self, options: Any) -> None:  # noqa: ANN401 - the benchmark's InflightOptions
        if options.precision not in PRECISIONS:
            raise ValueError(f"the inflight {self.recipe.benchmark} backend runs in {', '.join(PRECISIONS)}, not "
                             f"{options.precision!r}: set --precision=bf16")
        if options.kv_cache_dtype not in KV_CACHE_DTYPES:
            raise ValueError(f"kv_cache_dtype must be one of {', '.join(KV_CACHE_DTYPES)}, not "
                             f"{options.kv_cache_dtype!r}")
        device = placed_on(options.device, options.cpu_threads)
        if device.type == "cuda" and options.precision == "fp32":
            raise ValueError("the inflight backend on CUDA runs bf16, fp16 or fp8 (FlashAttention has no float32): "
                             "set --precision=bf16")
        # What GPU each engine needs is checked before a run loads anything (code/config/capabilities.py, from the
        # backend's declaration); FP8 off a GPU is refused by the fields' device rules.
        fp8 = options.precision == "fp8" or options.kv_cache_dtype == "fp8"
        if fp8 and (options.engine_dir is None or options.engine_spec is None):
            raise ValueError("an FP8 inflight run needs InflightOptions.engine_dir and engine_spec (the engine "
                             "holds the calibration): build it with make generate_engines")
        spec = self.recipe.spec_type(options.model_name, options.precision, options.kv_cache_dtype,
                                     options.checkpoint, options.seed)
        model = self.recipe.load_model(spec, device, model_dtype(options.precision))
        amax = None
        if fp8:
            amax = load_calibration(self.recipe, options.engine_dir, options.engine_spec,
                                    n_positions=model.config.n_positions, run_args=options.run_args)
        if options.precision == "fp8":
            model.use_fp8_gemms(amax, fast_accum=options.fp8_fast_accum)
        if fp8:
            torch.cuda.empty_cache()  # the freed 16-bit weights' blocks back to the driver before the KV pool
        generation = self.generation(options, model)
        longest = min(max(1, options.max_prompt_length), model.config.n_positions - generation.max_new_tokens + 1)
        engine_options = EngineOptions(slots=options.max_batch_size, max_prompt_length=longest,
                                       cuda_graphs=options.cuda_graphs,
                                       kv_dtype=E4M3 if options.kv_cache_dtype == "fp8" else None,
                                       memory_bytes=usable_gpu_bytes(device) if device.type == "cuda" else 0)
        self.engine = InflightEngine(model, generation, engine_options, kv_amax=amax)
