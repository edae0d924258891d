# Measurement tools of the BERT GPU work (documentation/benchmarking.md): performance through the real harness,
# and the agreement of the fast precisions with float32. Results go to new folders under build/bench/.
BENCH_ARGS     ?=
AGREEMENT_ARGS ?=

.PHONY: bench agreement
# LoadGen Offline (+ worst case at 384 tokens), a Server QPS search and SingleStream for bert-99 and bert-99.9,
# shortened, on synthetic inputs and random weights, plus the HF baseline: build/bench/<timestamp>/bench.md.
# A CPU check of the bench itself: make bench BENCH_ARGS="--quick --benchmarks=bert-99 --scenarios=offline"
bench: build
	$(PY) -m scripts.bench_bert $(BENCH_ARGS)

# Logit error and answer-span agreement of fp16/bf16/fp8 engines with float32 on real text (random BERT-large and
# the trained MiniLM): build/bench/agreement-<timestamp>/agreement.md; exits non-zero when a bar is missed.
agreement: setup
	$(PY) -m scripts.bert_agreement $(AGREEMENT_ARGS)
