"""What MLPerf's LLM benchmarks share, whatever the model: a library for benchmarks, not a benchmark (no benchmark.py).

- ``cnn_dailymail.py``: the CNN/DailyMail eval file (``cnn_eval.json``), its records and reference summaries.
- ``rouge.py``: a LoadGen accuracy log's token ids, and ROUGE/gen_len of decoded predictions, as MLCommons scores.
- ``summary_accuracy.py``: an accuracy log scored against a reference's ROUGE and gen_len, and accuracy.txt;
  ``detokenize.py``: transformers 4.x's clean-up of decoded text, which the references' scores include.
- ``sentence_split.py``: one sentence per line for ROUGE-Lsum (``nltk.sent_tokenize`` with pinned punkt data).
- ``generation.py``: beam search and greedy decoding with HF ``generate``'s results, over any ``CausalLM``.
- ``beam_search.py``: one beam-search step for many slots at once, each at its own step (in-flight batching).
- ``contiguous_cache.py``: the KV cache of batch-at-a-time generation (one row per sequence);
  ``checkpoint.py``: HF checkpoint files read tensor by tensor, seeded random weights.
- ``kv_cache.py``: a paged KV cache whose prompt pages a sample's beams share, FP8 storage optional;
  ``cache_shape.py``: its shape and bytes, without torch (what a memory plan counts);
  ``paged_attention.py``: attention over packed prompts and, for decode, over that cache (Triton on CUDA);
  ``inflight_engine.py``: the in-flight batching loop over any model with prefill and decode over that cache;
  ``amax.py``: per-layer largest magnitudes over calibration prompts (an FP8 model's static scales);
  ``calibration_engine.py``: the engine folder holding that calibration, built once and loaded by FP8 runs;
  ``memory_plan.py``: how many slots fit a GPU beside the weights (without torch).
- ``backend_rules.py``: the backends' shared switch and the device and GPU rules their declarations name.

A benchmark keeps its model, tokenizer, prompt, reference scores and targets (GPT-J: ``code/gptj/``, Llama 3.1:
``code/llama31/``) and imports these. code/llm imports ``code/common``, ``code/config``, ``code/mlperf`` and
``code/numerics`` only, never a benchmark.
"""
