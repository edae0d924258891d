"""What a submission tree carries beside its logs: the harness's source and how to run each benchmark with it
(``code/``), the calibration write-up of every FP8 engine (``documentation/calibration.md``), and text that names no
folder of the machine that staged it.

MLPerf's submission rules ask for the code that produced the results (the source, or a public repository and the
exact commit) and, for a quantized model, how it was calibrated (which data, how the scales are computed). The runs
record the commit they ran (``metadata.json``: ``versions.harness_commit``), so ``code/source/`` is that commit's
tree, taken from git, not the working tree of the day of staging. The calibration write-up reads each FP8 engine's
own manifest (``engine.json``: calibration source, count, magnitudes), the record a run checked before it ran.
"""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import tarfile
from pathlib import Path

from code.common.paths import BUILD_DIR, REPO_ROOT
from code.common.rounds import LoadgenSource, get_round
from code.mlperf.run_record import RunRecord
from code.submission.model_info import implementation, ran_no_model
from code.submission.runs import TestRun

SOURCE_DIR = Path("code") / "source"
CALIBRATION_DOC = Path("documentation") / "calibration.md"
# An absolute path of two parts or more, where a path can start: at the start of a line or after a space, a quote,
# a bracket, "=" or "," (not "N/A", "C++/pybind11", "https://...", "build/logs").
ABSOLUTE_PATH = re.compile(r"(?<![^\s\"'`(\[=,])/(?:[\w.+@-]+/)+[\w.+@-]*")
# LoadGen's logs, the accuracy log and mlperf.conf are shipped as they were written; the harness's source is its
# own (its documentation names example folders). Every other text file is checked for paths of this machine.
NOT_SCANNED = ("mlperf_log_", "mlperf.conf")


def portable(text: str) -> str:
    """``text`` with every absolute path made relative to the checkout (``build/...``, ``code/...``) or to
    ``$MLPERF_SCRATCH_PATH``, and any other reduced to its last part: a submission is read on other machines, and
    the folders of this one are nobody's business there."""
    scratch = os.environ.get("MLPERF_SCRATCH_PATH")
    named = [(BUILD_DIR, "build"), (REPO_ROOT, "."), *([(Path(scratch), "$MLPERF_SCRATCH_PATH")] if scratch else [])]
    # Folders of this machine and what a shipped text says instead, most specific first.
    roots = sorted([(path.resolve(), label) for path, label in named] + named, key=lambda pair: len(str(pair[0])),
                   reverse=True)

    def relative(match: re.Match[str]) -> str:
        path = Path(match.group(0))
        for root, label in roots:
            if path == root or path.is_relative_to(root):
                rest = path.relative_to(root).as_posix()
                return rest if label == "." else f"{label}/{rest}".rstrip("/.")
        return path.name or match.group(0)

    return ABSOLUTE_PATH.sub(relative, text)


def host_paths(tree: Path, source: Path = SOURCE_DIR) -> list[str]:
    """Each shipped text file of the tree that names an absolute path, with the first such path."""
    found = []
    for path in sorted(tree.rglob("*")):
        relative = path.relative_to(tree)
        if not path.is_file() or relative.parts[:2] == source.parts or path.name.startswith(NOT_SCANNED):
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        match = ABSOLUTE_PATH.search(text)
        if match:
            found.append(f"{relative}: {match.group(0)}")
    return found


def harness_commit(tests: list[TestRun]) -> tuple[str | None, list[str]]:
    """The one harness commit the staged tests recorded, or None and why not."""
    commits = sorted({str(t.record.versions.get("harness_commit")) for t in tests})
    if commits == ["None"] or not commits:
        return None, ["the runs recorded no harness commit (run from a git checkout of the harness, so that code/ "
                      "can carry the source that made them)"]
    if len(commits) > 1:
        listed = ", ".join(commit[:10] for commit in commits)
        return None, [f"the staged runs were made with {len(commits)} harness commits ({listed}): a tree's code/ is "
                      "the source of one; run again, or stage the runs of one commit (LOGS=...)"]
    return commits[0], []


def repository_url() -> str | None:
    """The harness's public repository, when the checkout has a remote that is one (https or ssh)."""
    done = subprocess.run(["git", "config", "--get", "remote.origin.url"], cwd=REPO_ROOT, capture_output=True,
                          text=True)
    url = done.stdout.strip()
    return url if done.returncode == 0 and re.match(r"(https://|git@|ssh://)", url) else None


def write_source(tree: Path, commit: str, source: Path = SOURCE_DIR) -> list[str]:
    """``code/source/``: the harness at ``commit``, from git (the tracked files of that commit), without its
    dotfiles (CI, git and Docker settings), which the checker rejects as "git unfriendly" names, and without the
    folders that leaves empty, which it rejects too."""
    done = subprocess.run(["git", "archive", "--format=tar", commit], cwd=REPO_ROOT, capture_output=True)
    if done.returncode != 0:
        return [f"the runs' harness commit {commit[:10]} is not in this checkout ({done.stderr.decode().strip()}): "
                "stage from the checkout that made them"]
    target = tree / source  # src/source/ from v6.0 (the round's TreeLayout)
    target.mkdir(parents=True)
    with tarfile.open(fileobj=io.BytesIO(done.stdout)) as archive:
        members = [m for m in archive.getmembers() if not any(part.startswith(".") for part in Path(m.name).parts)]
        # The "data" filter where Python has it (3.11.4 on); git's archive of our own commit either way.
        archive.extractall(target, members=members, **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))
    for folder in sorted((p for p in target.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True):
        if not any(folder.iterdir()):
            folder.rmdir()
    return []


def write_code_readme(tree: Path, test: TestRun, commit: str | None, url: str | None, quantized: bool) -> None:
    """``code/<benchmark>/<implementation>/README.md`` (``src/`` from v6.0): where the source is, how to run it."""
    impl = implementation(test.record)
    code_dir = get_round(test.round).layout.source
    folder = tree / code_dir / test.benchmark / impl
    if (folder / "README.md").exists():
        return
    folder.mkdir(parents=True, exist_ok=True)
    family = test.benchmark.split("-")[0]
    loadgen = get_round(test.round).loadgen
    if isinstance(loadgen, LoadgenSource):
        built = (f"LoadGen {loadgen.version} built from mlcommons/inference at tag {loadgen.tag} (commit "
                 f"{loadgen.commit}), which `make build` takes from `LOADGEN_SRC=<a clone at that tag>`; its "
                 "`mlperf.conf` is read at run time")
        build = f"make build ROUND={test.round} LOADGEN_SRC=<clone of mlcommons/inference at {loadgen.tag}>"
    else:
        built = (f"LoadGen {loadgen.version}, built from its PyPI sdist (sha256 {loadgen.sha256}), which "
                 "`make build` downloads and checks")
        build = f"make build ROUND={test.round}"
    where = f"commit `{commit}`" if commit else "the commit the runs recorded"
    source = f"`{code_dir}/source/` of this tree: the harness at {where}" + (f" of {url}" if url else "")
    oracle = ("\n**The staged runs of this implementation are a pipeline test**: the oracle backend answers with the "
              "data set's gold answers and runs no model.\n" if ran_no_model(test.record) else "")
    calibration = (f"\nFP8 and INT8 engines: how they are calibrated is in `{CALIBRATION_DOC.as_posix()}`.\n"
                   if quantized else "")
    (folder / "README.md").write_text(
        f"# {test.benchmark}, implementation `{impl}`\n\n"
        f"Source: {source}. The harness is Python orchestration, a C++/pybind11 core over the official LoadGen, "
        f"and PyTorch backends; `{code_dir}/source/documentation/{family}.md` describes the benchmark. Round "
        f"{test.round}: {built}.\n{oracle}{calibration}\n"
        f"How to run it (from `{code_dir}/source/`; `README.md` there has the setup, Docker or a virtual "
        "environment):\n\n"
        f"```bash\nmake setup\nmake download_data download_model preprocess_data BENCHMARKS=\"{family}\"\n"
        f"{build}\n"
        f"make run ROUND={test.round} RUN_ARGS=\"--benchmarks={test.benchmark} --scenarios=<scenario> "
        "--test_mode=SubmissionRun\"\n"
        f"make run_audit_harness ROUND={test.round} RUN_ARGS=\"--benchmarks={test.benchmark} "
        "--scenarios=<scenario>\"   # the compliance audits the round requires, if any\n"
        "make stage_results SUBMITTER=<org> && make truncate_results SUBMITTER=<org> && "
        "make check_submission SUBMITTER=<org>\n```\n\n"
        f"Each scenario's `measurements/<system>/{test.benchmark}/<Scenario>/README.md` gives the exact command of "
        "its run.\n")


def uses_quantization(record: RunRecord) -> bool:
    """Whether the test ran calibrated 8-bit arithmetic: FP8 or INT8 matrix products, or GPT-J's FP8 KV cache."""
    return record.fields.get("precision") in ("fp8", "int8") or record.fields.get("kv_cache_dtype") == "fp8"


# What each benchmark's 8-bit engines quantize and where they calibrate, as the code does it (code/numerics/fp8.py,
# code/numerics/int8.py, code/bert/packed/, code/gptj/inflight/).
CALIBRATION_SETS = {
    "bert": ("the MLPerf BERT calibration set: the SQuAD v1.1 dev features listed in mlcommons/inference "
             "`calibration/SQuAD-v1.1/bert_calibration_features.txt` (100 features), preprocessed as the data set"),
    "gptj": ("the MLPerf GPT-J calibration set: the 1,000 CNN/DailyMail 3.0.0 train articles of mlcommons/inference "
             "`calibration/CNNDailyMail/calibration-list.txt`, as prompts built and tokenized as the data set's"),
}
QUANTIZED = {
    "bert": ("the input and the weight of the matrix products `{gemms}` of each of the {layers} encoder layers (`qkv`: "
             "the fused Q, K, V projection; `wo`: the attention output; `w1`, `w2`: the feed-forward network). "
             "Attention itself (softmax of QK^T, times V), LayerNorm, GELU, the residual adds, the embeddings and "
             "the QA head stay in fp16, unless the engine's entry below says otherwise."),
    "gptj": ("the input and the weight of both matrix products of each of the {layers} decoder layers: `w_in` = "
             "[QKV projection; MLP fc_in] on the LayerNorm's output, and `w_out` = [attention output; MLP fc_out] "
             "on their concatenated inputs. Attention, rotary embedding, GELU, LayerNorm, the embedding and the LM "
             "head stay 16-bit."),
}


def calibration_entry(test: TestRun) -> tuple[list[str], list[str]]:
    """The write-up of one 8-bit test's engine (markdown lines) and the problems that keep it from being complete."""
    family = test.benchmark.split("-")[0]
    fields = test.record.fields
    kind = "INT8" if fields.get("precision") == "int8" else "FP8"
    engine = test.record.provenance.get("engine")
    manifest_path = Path(str(engine)) / "engine.json" if engine else None
    try:
        manifest = json.loads(manifest_path.read_text()) if manifest_path else None
    except (OSError, ValueError):
        manifest = None
    if manifest is None or not manifest.get("calibration"):
        return [], [f"{test.describe()}: its {kind} engine's calibration record ({manifest_path}) is not "
                    "on this machine: stage where the engine was built (make generate_engines), so "
                    f"{CALIBRATION_DOC.as_posix()} can say how it was calibrated"]
    calibration = manifest["calibration"]
    source = str(calibration.get("source", ""))
    problems = [] if source.startswith("mlperf") else [
        f"{test.describe()}: its {kind} engine was calibrated on {source.split(':')[0] or 'unknown'} data, not the "
        "MLPerf calibration set (make download_data preprocess_data, then make generate_engines)"]
    digest = re.search(r"sha256=(\w+)", source)
    data = CALIBRATION_SETS[family] if source.startswith("mlperf") else f"synthetic inputs ({portable(source)})"
    kv = fields.get("kv_cache_dtype") == "fp8"
    lines = [f"## {test.benchmark} {test.scenario}: engine `{manifest.get('engine_key', Path(str(engine)).name)}`", ""]
    if fields.get("precision") in ("fp8", "int8"):
        gemms = str(fields.get("fp8_gemms") or "qkv+wo+w1+w2").replace("+", "`, `")
        config = manifest.get("config", {})
        layers = config.get("num_layers") or config.get("n_layer") or "?"
        tensors = "INT8 tensors (symmetric, -127..127)" if kind == "INT8" else "FP8 (e4m3) tensors"
        lines.append(f"- {tensors}: " + QUANTIZED[family].format(gemms=gemms, layers=layers))
    if kv:
        lines.append("- KV cache: keys and values stored in e4m3 with one scale per layer for keys and one for "
                     "values, from their largest magnitudes over the calibration prompts (`k`, `v` below).")
    lines += [
        f"- Calibration data: {data}; {calibration.get('count')} inputs"
        + (f" (sha256 of the tokenized set: {digest.group(1)})" if digest else "") + ".",
        f"- Calibrated in {calibration.get('dtype', '16-bit')} on {calibration.get('device', 'the device')}, with "
        "the engine's own weights (rounded to its storage type first).",
    ]
    fp8 = fields.get("precision") == "fp8"
    if fp8 and fields.get("fp8_fast_accum"):
        lines.append("- FP8 products accumulate with cuBLASLt fast accumulation (`fp8_fast_accum`).")
    if fp8 and fields.get("fp8_residual"):
        lines.append("- The residual stream is stored only in FP8 (`fp8_residual`): each LayerNorm's output is kept "
                     "as the next matrix product's quantized input (that input's static scale), and each residual "
                     "add reads it from there; the last layer's output stays 16-bit for the QA head.")
    if fp8 and fields.get("fp8_attention"):
        lines.append("- Attention runs in FP8 (`fp8_attention`): the q, k, v matrix product adds its bias and writes "
                     "e4m3 with the static scale of the attention's input (`<layer>.attn` in the engine's `amax`, "
                     "calibrated as the other inputs); q.k is an FP8 product with fp32 accumulation, the softmax is "
                     "fp32 and p.v runs in fp16 with fp32 accumulation.")
    amax = calibration.get("amax", {})
    count = sum(len(v) if isinstance(v, list) else 1 for v in amax.values()) if isinstance(amax, dict) else 0
    lines += [f"- Recorded: {count} calibrated magnitudes (`amax`) in the engine's `engine.json`.", ""]
    return lines, problems


FP8_RULES = ["Post-training quantization to FP8 (e4m3, largest finite value 448), symmetric and per tensor, with "
             "static scales, no retraining:", "",
             "- Weights: each quantized weight `W` is stored as `round_e4m3(W / s)` with `s = max|W| / 448`, once "
             "when the engine loads.",
             "- Activations: the input `x` of each FP8 matrix product is quantized as `round_e4m3(clip(x / s, -448, "
             "448))` with the static `s = amax / 448`, where `amax` is the largest magnitude of that input over the "
             "calibration set, observed in a 16-bit forward of the model (`make generate_engines`; no kernel "
             "reduces over a tensor at run time).",
             "- Products accumulate in fp32 (unless an engine below says fast accumulation) and are written in 16 "
             "bits; everything else runs in 16 bits (unless an engine below says its residual stream or its "
             "attention is FP8).",
             "- Rounding is to nearest even; values beyond the calibrated range saturate.", ""]

INT8_RULES = [
    "Post-training quantization to INT8, symmetric (levels -127 to 127, zero exact), with static scales, no "
    "retraining:", "",
    "- Weights: row `n` (one output channel) of each quantized weight `W` is stored as `round(W[n] / s[n])` with "
    "`s[n] = max|W[n]| / 127`, once when the engine loads.",
    "- Activations: the input `x` of each INT8 matrix product is quantized as `round(clip(x / s, -127, 127))` with "
    "the static `s = amax / 127`, where `amax` is the largest magnitude of that input over the calibration set, "
    "observed in a 16-bit forward of the model (`make generate_engines`; the same magnitudes an FP8 engine "
    "records; no kernel reduces over a tensor at run time).",
    "- Products accumulate exactly in int32; each output is dequantized in fp32 by `s_x * s_w[n]`, its bias added, "
    "and written in 16 bits or quantized again as the next matrix product's input; everything else runs in 16 bits.",
    "- Rounding is to nearest even; values beyond the calibrated range saturate.", ""]


def write_calibration(tree: Path, tests: list[TestRun], required: bool = False) -> list[str]:
    """``documentation/calibration.md`` for the staged 8-bit tests: the rules of each format they used, then an
    entry per engine; returns what is missing. Without 8-bit tests, a file only where the round ``required`` one,
    saying nothing was calibrated."""
    quantized = [t for t in tests if uses_quantization(t.record)]
    lines = ["# Calibration and quantization", ""]
    problems: list[str] = []
    if not quantized:
        if not required:
            return []
        precisions = sorted({str(t.record.fields.get("precision", "?")) for t in tests})
        lines.append(f"No staged run uses an FP8 or INT8 engine: they ran at {', '.join(precisions)} (each "
                     "scenario's `measurements/.../README.md` gives its precision), so nothing was calibrated or "
                     "quantized.")
    int8 = [t for t in quantized if t.record.fields.get("precision") == "int8"]
    if len(int8) < len(quantized):
        lines += FP8_RULES
    if int8:
        lines += INT8_RULES
    for test in sorted(quantized, key=lambda t: (t.benchmark, t.scenario)):
        entry, missing = calibration_entry(test)
        lines += entry
        problems += missing
    path = tree / CALIBRATION_DOC
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")
    return problems
