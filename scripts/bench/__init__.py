"""``make bench``: BERT's performance figures through the real harness, against a reference-style baseline.

Runs real LoadGen tests with ``python -m code.main`` (each test in its own child process, exactly as ``make run``
does) on synthetic SQuAD-like inputs and random BERT-large weights, with shortened durations, and measures:

- Offline samples/s and tokens/s (samples/s x the mean real length of the inputs), at SQuAD-like lengths and at a
  full 384 tokens (the worst case). ``offline_expected_qps`` must be at or above the real throughput or LoadGen's
  one query ends before the minimum duration (INVALID), so it comes from a short probe run, and a run that still
  misses the minimum duration is repeated once with its own measured throughput.
- Server: the highest ``server_target_qps`` that stays VALID (p99 <= 130 ms), searched from 0.8 x the Offline
  throughput (step up or down until bracketed, then bisect; every try and its VALID/INVALID reason is reported).
- SingleStream: LoadGen's early-stopping estimate of the p90 latency.
- Baseline: HF transformers ``BertForQuestionAnswering`` (the same architecture, random init, float32, batch 1,
  padded to 384 tokens, as the MLCommons reference runs it) on the same device; every figure gets its ratio to it.

Everything lands in a new ``build/bench/<timestamp>/``: ``bench.json``, ``bench.md`` (the closing table), and under
``runs/`` each harness invocation's logs and transcript. documentation/benchmarking.md explains the figures.

    python -m scripts.bench [--benchmarks bert-99,bert-99.9] [--scenarios offline,server,singlestream]
        [--min_duration_ms MS] [--skip_baseline] [--quick] [--extra_run_args "--gpu_batch_size=512 ..."] [--out DIR]

Modules: ``settings`` (durations, targets, margins, the fields the bench sets itself), ``runs`` (one LoadGen test per
child process; the Offline and SingleStream measurements), ``server_search`` (the highest VALID Server QPS),
``baseline`` (the HF reference-style baseline), ``report`` (figures, the closing table, bench.json and bench.md),
``cli`` (options and the order of the measurements). The probes and the Server search themselves are the product's
(``code/tuning/search.py``, also run by ``make find_performance``): one implementation.
"""
