"""llama3.1-8b as the orchestration sees it: which data and weights a run uses, its runner (batch by batch, or the
in-flight engine pulling samples from the C++ core's session) and its scorer.

The fallback rule every benchmark shares (code/mlperf/inputs.py): a performance run without the preprocessed set or
the checkpoint runs synthetic prompts and random weights of the configured architecture and says so; an accuracy
run refuses and names the make step. An edge system (systems/<system>.json) runs the 5,000-sample edge set where
the round's checker has one (v5.1, v6.1), any other the 13,368-sample datacenter set. Responses are the generated int32
token ids, the final EOS included, with their count reported to LoadGen (``token_responses``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from code.common.constants import TestMode
from code.common.paths import ENGINES_DIR, PREPROCESSED_DATA_DIR
from code.config.backends import runs_model
from code.config.resolved import ResolvedConfig
from code.llama31.dataset import MANIFEST_FILE, SAMPLE_COUNTS, TOKENIZED_SUBDIR
from code.llama31.tokenizer import CHECKPOINT
from code.mlperf.benchmarks import (
    AccuracyReport,
    EngineReport,
    InputsDescription,
    InputsUnavailableError,
    PreparedTest,
    model_name_lookup,
    prepared_test,
)
from code.mlperf.devices import backend_on, resolve_cpu_threads, resolve_devices, torch_device
from code.mlperf.inputs import InputChoice, InputLocations, ModelNaming, model_provenance, synthetic_count
from code.mlperf.inputs import choose_inputs as choose_inputs_at

FETCH_STEP = "make download_data download_model preprocess_data BENCHMARKS=llama31"
# run_verification.py's arguments for a TEST06 audit: the responses end with at most one EOS, and the one the
# instruct model ends its answer with is <|eot_id|> (the script's default, 2, is Llama 2's).
TEST06_ARGS = ("--eos_token_id", "128009", "--dtype", "int32")
NAMING = ModelNaming(prefix="Llama 3.1 ", mlperf_model="8b", mlperf_label="Llama-3.1-8B-Instruct",
                     oracle_gives="reference summaries")


def data_set(config: ResolvedConfig) -> str:
    """``edge`` for a run of the edge set (code/config/resolve.py's ``edge_set``: an edge system's, in v5.1 and
    v6.1, whose checker names it llama3.1-8b-edge: 5,000 samples), else ``datacenter``: the 13,368 samples a
    datacenter or datacenter,edge system, and one whose type is not known yet, run."""
    from code.config.resolve import edge_set

    return "edge" if edge_set(config) else "datacenter"


def choose_inputs(config: ResolvedConfig, mode: TestMode) -> InputChoice:
    """The shared fallback rule with llama3.1-8b's locations."""
    where = InputLocations(preprocessed_dir=PREPROCESSED_DATA_DIR / TOKENIZED_SUBDIR / data_set(config),
                           manifest_name=MANIFEST_FILE, checkpoint=CHECKPOINT, fetch_step=FETCH_STEP,
                           data_name="CNN/DailyMail (llama3.1-8b)", model_name="Llama-3.1-8B-Instruct checkpoint")
    return choose_inputs_at(config, mode, where)


def backend_context(config: ResolvedConfig, choice: InputChoice, max_prompt_length: int = 0) -> Any:
    from code.llama31.backends import BackendContext

    return BackendContext(device=torch_device(resolve_devices(config)[0]), cpu_threads=resolve_cpu_threads(config),
                          checkpoint=choice.checkpoint, max_prompt_length=max_prompt_length,
                          engines_dir=ENGINES_DIR / config.system / "llama31" / config.scenario.value)


def describe_inputs(config: ResolvedConfig, mode: TestMode) -> InputsDescription:
    """What a run would use, without loading anything heavy; what it cannot run stops here."""
    from code.llama31.architecture import LlamaConfig
    from code.llama31.backends import backend_class

    choice = choose_inputs(config, mode)
    if runs_model(config.benchmark, config["backend"]) and choice.random_weights:
        with model_name_lookup(config["model_name"]):  # a checkpoint brings its own architecture
            LlamaConfig.from_name(config["model_name"])
    named = model_provenance(config, choice, NAMING)
    context = backend_context(config, choice)
    engine = backend_class(config["backend"]).engine_dir(config, context)
    if engine is not None:  # the MLPerf calibration set is not preprocessed yet (backends/inflight_engine.py)
        named.invalid_because.append("FP8 scales calibrated on synthetic prompts, not the MLPerf calibration list")
    scale = config["synthetic_length_scale"]
    lengths = "the data set's lengths" + (f" x {scale}" if scale != 1.0 else "")
    return named.described(choice, f"{synthetic_count(config)} prompts, {lengths}", context.device, engine,
                           generation="greedy, 1 to 128 new tokens")


def generate_engine(config: ResolvedConfig) -> EngineReport:
    """Build the engine a run of this config loads (the inflight backend's FP8 calibration, as GPT-J's); the other
    configs have nothing to build: their backend loads the checkpoint or draws random weights when a run starts."""
    from code.llama31.backends import backend_class

    describe_inputs(config, TestMode.PerformanceOnly)
    choice = choose_inputs(config, TestMode.PerformanceOnly)
    return backend_class(config["backend"]).generate_engine(config, backend_context(config, choice))


def load_samples(config: ResolvedConfig, choice: InputChoice):  # noqa: ANN201 - LlamaSamples, imported lazily
    from code.llama31.dataset import LlamaSamples

    if choice.data_dir is not None:
        return LlamaSamples.load(choice.data_dir)
    return LlamaSamples.synthetic(synthetic_count(config), seed=config["seed"],
                                  length_scale=config["synthetic_length_scale"])


def prepare_test(config: ResolvedConfig, mode: TestMode) -> PreparedTest:
    """Load prompts, backend and scorer for one LoadGen test of llama3.1-8b."""
    from code.llama31.backends import backend_class
    from code.llama31.dataset import load_targets
    from code.llm.runner import ContinuousTokenRunner, TokenRunner, runner_for, samples_and_references

    provenance = describe_inputs(config, mode)
    choice = choose_inputs(config, mode)
    samples, references = samples_and_references(load_samples(config, choice), choice.synthetic, load_targets,
                                                  FETCH_STEP, config["num_samples"])
    decode = None
    if references is not None and mode is not TestMode.PerformanceOnly:
        from code.llama31.tokenizer import decoder, load_tokenizer
        from code.llm.sentence_split import splitter_name

        decode = decoder(load_tokenizer(Path(choice.checkpoint)))  # the tokenizer comes with the checkpoint
        splitter_name()  # scoring needs nltk's punkt data: stop before the run, not after it
    context = backend_context(config, choice, max_prompt_length=samples.max_length)
    chosen = backend_class(config["backend"])
    full_set = data_set(config)
    # LoadGen times llama's first tokens (token_responses below): a backend that streams them reports each as soon
    # as it has it; the others hand them over with the responses.
    streams = chosen.streams_first_tokens

    def runner_on(device: str, name: str) -> TokenRunner | ContinuousTokenRunner:
        # the inflight backend's engine pulls samples from the core's session (serve); pytorch runs batch by batch.
        return runner_for(samples, backend_on(device, config, chosen, context, name), stream_first_tokens=streams)

    def evaluate(log_dir: Path) -> AccuracyReport:
        from code.llama31.accuracy import REFERENCES, evaluate

        if references is None or decode is None:
            raise InputsUnavailableError(f"accuracy needs the real data set and checkpoint; run {FETCH_STEP}")
        # The checker's gen_len bar is absolute (the whole set's): a subset is held to its share of it.
        share = min(1.0, len(samples) / SAMPLE_COUNTS[full_set])
        result = evaluate(log_dir / "mlperf_log_accuracy.json", references, decode, log_dir / "accuracy.txt",
                          full_set, gen_len_target=REFERENCES[full_set].gen_len_target * share)
        return result.accuracy_report(data_set=full_set)

    return prepared_test(samples.lengths, runner_on, evaluate, provenance, input_lengths=samples.describe_lengths(),
                         devices=resolve_devices(config), cpu_threads=context.cpu_threads, token_responses=True,
                         streams_first_tokens=streams, num_samples=config["num_samples"])
