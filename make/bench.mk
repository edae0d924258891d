# Measurement tools of the BERT and GPT-J GPU work (documentation/benchmarking.md): performance through the harness,
# and the agreement of the fast precisions with float32. Results go to new folders under build/bench/.
BENCH_ARGS     ?=
AGREEMENT_ARGS ?=

.PHONY: bench agreement
# LoadGen Offline (+ worst case at 384 tokens), a Server QPS search and SingleStream for bert-99 and bert-99.9,
# shortened, on synthetic inputs and random weights, plus the HF baseline: build/bench/<timestamp>/bench.md.
# GPT-J (EOS forced and 128 new tokens, tokens/s): make bench BENCH_ARGS="--benchmarks=gptj-99 --extra_run_args=..."
# A CPU check of the bench itself: make bench BENCH_ARGS="--quick --benchmarks=bert-99 --scenarios=offline"
bench: build
	$(PY) -m scripts.bench $(BENCH_ARGS)

# The fast precisions on a proxy, as information: SQuAD F1 of each engine on the trained MiniLM QA proxy relative to
# float32's (against bert-99's 99.5% and bert-99.9's 99.95%), logit error and span agreement (also on random
# BERT-large and the random-head MiniLM): build/bench/agreement-<timestamp>/agreement.md. The real accuracy run
# chooses the engine a run uses (documentation/bert_gpu.md); AGREEMENT_ARGS=--require=configs holds every engine of
# the H100/H200 ladders to its target and exits non-zero when one misses.
# GPU run: make agreement AGREEMENT_ARGS="--device=cuda --precisions=fp16,bf16,fp8,fp8:fp8_fast_accum=true"
agreement: setup
	$(PY) -m scripts.agreement $(AGREEMENT_ARGS)
