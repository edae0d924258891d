"""GPT-J as the orchestration sees it: which data and weights a run uses, and its batch runner.

Same fallback rule as BERT (code/mlperf/inputs.py): a performance run without the preprocessed CNN/DailyMail set
or the checkpoint runs on synthetic prompts and random weights of the configured GPT-J architecture, and says so;
an accuracy run refuses and names the make step that fetches what is missing. The responses LoadGen logs are the
generated token ids (int32), which the accuracy scorer decodes for ROUGE.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from code.common.constants import DATASET_SIZE, Benchmark, TestMode
from code.common.paths import ENGINES_DIR, MODELS_DIR, PREPROCESSED_DATA_DIR
from code.config.backends import runs_model
from code.config.resolved import ResolvedConfig
from code.gptj.download_model import CHECKPOINT_SUBDIR, MODEL_SUBDIR
from code.gptj.prompt import MANIFEST_FILE, TOKENIZED_SUBDIR
from code.mlperf.benchmarks import (
    AccuracyReport,
    BenchmarkError,
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

PREPROCESSED_DIR = PREPROCESSED_DATA_DIR / TOKENIZED_SUBDIR
CHECKPOINT = MODELS_DIR / MODEL_SUBDIR / CHECKPOINT_SUBDIR
FETCH_STEP = 'make download_data download_model preprocess_data BENCHMARKS="gptj"'
INPUTS = InputLocations(preprocessed_dir=PREPROCESSED_DIR, manifest_name=MANIFEST_FILE, checkpoint=CHECKPOINT,
                        fetch_step=FETCH_STEP, data_name="CNN/DailyMail", model_name="MLCommons GPT-J checkpoint")
CLOSED_DIVISION_BEAMS = 4
# The model_name of the MLPerf model; any other is a small model for tests.
MLPERF_MODEL = "6b"
NAMING = ModelNaming(prefix="GPT-J ", mlperf_model=MLPERF_MODEL, mlperf_label="GPT-J 6B",
                     oracle_gives="reference summaries")


def choose_inputs(config: ResolvedConfig, mode: TestMode) -> InputChoice:
    """The shared fallback rule with GPT-J's locations."""
    return choose_inputs_at(config, mode, INPUTS)


def backend_context(config: ResolvedConfig, choice: InputChoice, **more: Any) -> Any:  # BackendContext
    """What the chosen backend draws on: the device, the weights, where this config's engines live (``more``: the
    run's samples and references)."""
    from code.gptj.backends import BackendContext

    return BackendContext(device=torch_device(resolve_devices(config)[0]), cpu_threads=resolve_cpu_threads(config),
                          checkpoint=choice.checkpoint,
                          engines_dir=ENGINES_DIR / config.system / "gptj" / config.scenario.value, **more)


def describe_inputs(config: ResolvedConfig, mode: TestMode) -> InputsDescription:
    """What a run would use, without loading anything heavy; what it cannot run stops here."""
    from code.gptj.backends import backend_class

    choice = choose_inputs(config, mode)
    if runs_model(Benchmark.GPTJ, config["backend"]) and choice.random_weights:
        check_model_name(config)  # a checkpoint brings its own architecture
    named = model_provenance(config, choice, NAMING)
    invalid_because = named.invalid_because
    if config["num_beams"] != CLOSED_DIVISION_BEAMS:
        invalid_because.append(f"num_beams={config['num_beams']} (the closed division requires beam search "
                               f"width {CLOSED_DIVISION_BEAMS})")
    if config["synthetic_output_lengths"] == "forced":
        if not choice.synthetic:
            raise BenchmarkError("--synthetic_output_lengths=forced is for synthetic inputs (real outputs end where "
                                 "the model chooses EOS): set --synthetic_output_lengths=model")
        invalid_because.append("output lengths forced at drawn values (synthetic runs only)")
    context = backend_context(config, choice)  # resolves the device after the backend's own rules
    engine = backend_class(config["backend"]).engine_dir(config, context)
    if engine is not None:
        from code.gptj.backends.inflight_engine import CALIBRATION_DIR

        if not (CALIBRATION_DIR / MANIFEST_FILE).is_file():
            invalid_because.append("FP8 scales calibrated on synthetic prompts, not the MLPerf calibration list")
    lengths = "all 1,919 tokens" if config["synthetic_lengths"] == "max" else "CNN/DailyMail-like lengths"
    if config["synthetic_lengths"] == "dataset" and config["synthetic_length_scale"] != 1.0:
        lengths += f" x {config['synthetic_length_scale']}"
    generation = "greedy" if config["num_beams"] == 1 else f"beam search, width {config['num_beams']}"
    if config["synthetic_output_lengths"] == "forced":
        generation += "; EOS forced at drawn output lengths (mean ~70 tokens)"
    return named.described(choice, f"{synthetic_count(config)} prompts, {lengths}", context.device, engine,
                           generation=generation)


def check_model_name(config: ResolvedConfig) -> None:
    """An unknown ``model_name`` stops the run with the known names (the table lives with the model)."""
    from code.gptj.architecture import GptjConfig  # without torch

    with model_name_lookup(config["model_name"]):
        GptjConfig.from_name(config["model_name"])


def generate_engine(config: ResolvedConfig) -> EngineReport:
    """Build the engine a run of this config loads (the inflight backend's FP8 calibration); the other configs have
    nothing to build: their backend loads the checkpoint or draws random weights when a run starts."""
    from code.gptj.backends import backend_class

    describe_inputs(config, TestMode.PerformanceOnly)  # refuses here what the run would refuse
    choice = choose_inputs(config, TestMode.PerformanceOnly)
    return backend_class(config["backend"]).generate_engine(config, backend_context(config, choice))


def load_samples(config: ResolvedConfig, choice: InputChoice):  # noqa: ANN201 - GptjSamples, imported lazily
    from code.gptj.dataset import GptjSamples

    if choice.data_dir is not None:
        return GptjSamples.load(choice.data_dir)
    if config["synthetic_lengths"] == "max":
        samples = GptjSamples.full_length(synthetic_count(config), seed=config["seed"])
    else:
        samples = GptjSamples.synthetic(synthetic_count(config), seed=config["seed"],
                                        length_scale=config["synthetic_length_scale"])
    if config["synthetic_output_lengths"] == "forced":
        samples = samples.with_forced_lengths(config["seed"])
    return samples


def prepare_test(config: ResolvedConfig, mode: TestMode) -> PreparedTest:
    """Load prompts, backend and scorer for one LoadGen test of GPT-J."""
    from code.gptj.backends import backend_class
    from code.gptj.tokenizer import load_tokenizer
    from code.llm.cnn_dailymail import load_targets
    from code.llm.runner import ContinuousTokenRunner, TokenRunner, runner_for, samples_and_references

    provenance = describe_inputs(config, mode)
    choice = choose_inputs(config, mode)
    samples, references_text = samples_and_references(load_samples(config, choice), choice.synthetic, load_targets,
                                                      FETCH_STEP, config["num_samples"])
    tokenizer = load_tokenizer() if references_text is not None else None
    if references_text is not None and mode is TestMode.AccuracyOnly:
        from code.llm.sentence_split import splitter_name

        splitter_name()  # scoring needs nltk's punkt data: stop before the run, not after it
    context = backend_context(config, choice, max_prompt_length=samples.max_length,
                              references_text=references_text if tokenizer else None, tokenizer=tokenizer)
    chosen = backend_class(config["backend"])

    def runner_on(device: str, name: str) -> TokenRunner | ContinuousTokenRunner:
        return runner_for(samples, backend_on(device, config, chosen, context, name), samples.forced_length)

    def evaluate(log_dir: Path) -> AccuracyReport:
        from code.gptj.accuracy import GEN_LEN_TARGET, evaluate_accuracy_log

        if references_text is None or tokenizer is None:
            raise InputsUnavailableError(f"accuracy needs the real data set; run {FETCH_STEP}")
        # The checker's gen_len bar is absolute (13,368 summaries); a subset is held to its share of it.
        share = min(1.0, len(samples) / DATASET_SIZE[Benchmark.GPTJ])
        result = evaluate_accuracy_log(
            log_dir / "mlperf_log_accuracy.json", references_text,
            lambda ids: tokenizer.decode(ids, skip_special_tokens=True, clean_up_tokenization_spaces=True),
            config.workload.accuracy_target.value, log_dir / "accuracy.txt", gen_len_target=GEN_LEN_TARGET * share)
        return result.accuracy_report(f"; gen_len target scaled to {len(samples)} of {DATASET_SIZE[Benchmark.GPTJ]} "
                                      "samples" if share < 1.0 else "")

    return prepared_test(samples.lengths, runner_on, evaluate, provenance, input_lengths=samples.describe_lengths(),
                         devices=resolve_devices(config), cpu_threads=context.cpu_threads,
                         num_samples=config["num_samples"])
