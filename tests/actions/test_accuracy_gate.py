"""The accuracy gate of an engine ladder, end to end through ``python -m code.main`` (code/tuning/accuracy_gate.py).

The runs use a copy of the product with a user's ``custom.py``: ladders whose engines are the oracle backend with
and without a forced miss (BERT ``oracle_shift``, GPT-J ``oracle_drop``) on the fixtures' real data sets, and the
tiny BERT with a checkpoint file of its own. Everything else is the real harness: the child processes, LoadGen,
scoring, the stored misses, the summary and metadata.json.
"""

import json
import os
import re
import shutil
import subprocess
import sys

import pytest
import torch

from code.bert.model import BERT_CONFIGS, random_weights
from code.common.constants import TestMode
from code.common.paths import LIB_DIR, REPO_ROOT
from code.gptj.prompt import TOKENIZED_SUBDIR as GPTJ_TOKENIZED

pytestmark = pytest.mark.slow
FIXTURES = REPO_ROOT / "tests" / "fixtures"
HEADER = '''from code.common.constants import AccuracyTarget, HarnessType, PowerSetting
from code.config.ladder import Rung
from code.config.registry import ConfigRegistry
'''
BERT_CUSTOM = HEADER + '''from configs.bert.Offline import CPU


@ConfigRegistry.register(HarnessType.Custom, AccuracyTarget.k_99, PowerSetting.MaxP)
class LadderBox(CPU):
    engine_ladder = (Rung("shifted", "the oracle two tokens off: a forced miss", oracle_shift=2),
                     Rung("exact", "the oracle's gold answers", oracle_shift=0))


@ConfigRegistry.register(HarnessType.Custom, AccuracyTarget.k_99, PowerSetting.MaxP)
class MissBox(CPU):
    engine_ladder = (Rung("three", "the oracle three tokens off", oracle_shift=3),
                     Rung("two", "the oracle two tokens off", oracle_shift=2))


@ConfigRegistry.register(HarnessType.Custom, AccuracyTarget.k_99, PowerSetting.MaxP)
class TinyBox(CPU):
    model_name = "tiny"
    gpu_batch_size = 16
    engine_ladder = (Rung("bf16", "bf16 GEMMs", precision="bf16"),)
'''
GPTJ_CUSTOM = HEADER + '''from configs.gptj.Offline import CPU


@ConfigRegistry.register(HarnessType.Custom, AccuracyTarget.k_99, PowerSetting.MaxP)
class LadderBox(CPU):
    engine_ladder = (Rung("cut", "the reference summaries 40 tokens short: a forced miss", oracle_drop=40),
                     Rung("whole", "the reference summaries", oracle_drop=0))


@ConfigRegistry.register(HarnessType.Custom, AccuracyTarget.k_99, PowerSetting.MaxP)
class MissBox(CPU):
    pass
'''
# The oracle answers a batch of 4 in at least 20 ms: ~200 samples/s, so an Offline query sized for 400/s outlasts
# the 1 s minimum duration on any machine.
ORACLE = ["--backend=oracle", "--gpu_batch_size=4", "--oracle_batch_ms=20"]
SHORT_OFFLINE = ["--min_duration=1000", "--min_query_count=1", "--offline_expected_qps=400"]


@pytest.fixture(scope="module")
def repo(tmp_path_factory, harness_built):
    """The product's code, configs and systems with the custom.py above, a build/ with the compiled core linked in
    and the BERT and GPT-J fixtures preprocessed: the real data sets as far as a run can tell."""
    root = tmp_path_factory.mktemp("repo")
    for folder in ("code", "configs", "systems"):
        shutil.copytree(REPO_ROOT / folder, root / folder, ignore=shutil.ignore_patterns("__pycache__", "custom.py"))
    (root / "configs" / "bert" / "Offline" / "custom.py").write_text(BERT_CUSTOM)
    (root / "configs" / "gptj" / "Offline" / "custom.py").write_text(GPTJ_CUSTOM)
    description = json.loads((root / "systems" / "CPU.json").read_text())
    for name in ("LadderBox", "MissBox", "TinyBox"):  # a SubmissionRun asks the round about the system's type
        (root / "systems" / f"{name}.json").write_text(json.dumps({**description, "system_name": name}))
    (root / "build").mkdir()
    (root / "build" / "lib").symlink_to(LIB_DIR, target_is_directory=True)
    for module, flag, fixture in (("code.bert.preprocess_data", "--squad_json", "squad_tiny.json"),
                                  ("code.gptj.preprocess_data", "--eval_json", "cnn_tiny.json")):
        done = subprocess.run([sys.executable, "-m", module, flag, str(FIXTURES / fixture),
                               "--preprocessed_data_dir", str(root / "build" / "preprocessed_data")],
                              cwd=root, capture_output=True, text=True, env=_env(root, root / "tuned"))
        assert done.returncode == 0, done.stdout + done.stderr
    return root


def _env(repo, tuned):
    return {**os.environ, "MLPERF_BUILD_DIR": str(repo / "build"), "MLPERF_TUNED_DIR": str(tuned),
            "PYTHONUNBUFFERED": "1"}


def run(repo, tuned, *args, timeout=300):
    done = subprocess.run([sys.executable, "-m", "code.main", "--action=run", *args], cwd=repo, capture_output=True,
                          text=True, env=_env(repo, tuned), timeout=timeout)
    assert "Traceback" not in done.stdout + done.stderr, done.stdout[-4000:] + done.stderr[-2000:]
    return done


def metadata(folder):
    return json.loads((folder / "metadata.json").read_text())


def test_a_miss_falls_back_is_stored_and_the_next_run_starts_from_the_engine_that_passed(repo, tmp_path):
    tuned, logs = tmp_path / "tuned", tmp_path / "logs"
    done = run(repo, tuned, "--system_name=LadderBox", "--test_mode=SubmissionRun", *ORACLE, *SHORT_OFFLINE,
               f"--log_dir={logs}")
    assert done.returncode == 0, done.stdout[-4000:]
    records = tuned / "LadderBox" / "bert-99" / "Offline.misses.json"
    # the miss in one line: the score, the target, the engine, where it is stored, what comes next
    assert re.search(r"\[accuracy_gate\] bert-99 Offline: engine shifted missed the accuracy target: F1 [\d.]+ below "
                     rf"target 89\.965; recorded in {re.escape(str(records))}; building and trying exact",
                     done.stdout), done.stdout[-4000:]
    record = json.loads(records.read_text())
    (miss,) = record["misses"]
    assert record["checkpoint"] == "none (oracle backend)" and miss["engine"] == "shifted"
    assert miss["values"]["oracle_shift"] == 2 and miss["failures"][0].startswith("F1 ")
    assert "f1 = " in miss["score"] and "(target 89.965)" in miss["score"]

    # The missed run moved out of the way: the SubmissionRun's accuracy folder holds the one that passed.
    scenario = logs / "LadderBox" / "bert-99" / "Offline"
    missed_dir = logs / "gate" / "shifted" / "LadderBox" / "bert-99" / "Offline"
    missed = metadata(missed_dir)
    assert missed["result"]["verdict"] == "FAIL" and missed["result"]["log_dir"] == str(missed_dir)
    assert (missed["engine"]["gate"], missed["engine"]["next"]) == ("missed", "exact") and miss["log_dir"] == str(
        missed_dir)
    accuracy = metadata(scenario / "accuracy")
    assert accuracy["result"]["accuracy"]["f1"] == 100.0 and accuracy["engine"]["engine"] == "exact"
    performance = metadata(scenario / "performance" / "run_1")
    engine = performance["engine"]
    assert performance["result"]["valid"] is True and performance["config"]["fields"]["oracle_shift"] == 0
    assert performance["config"]["sources"]["oracle_shift"] == "LadderBox engine_ladder[exact]"
    assert (engine["engine"], engine["gate"], engine["accuracy_run"]) == ("exact", "passed", str(scenario / "accuracy"))
    assert engine["ladder"] == ["shifted", "exact"] and engine["description"] == "the oracle's gold answers"
    assert engine["summary"].startswith("exact: passed the accuracy gate, exact_match = 100.000, f1 = 100.000")
    assert "above it shifted (F1 " in engine["summary"]
    assert "      engine: shifted: MISSED the accuracy target (F1 " in done.stdout
    assert "      engine: exact: passed the accuracy gate" in done.stdout and "Exit status" not in done.stdout
    # staging takes the newest accuracy run of the test: the one that passed
    from code.submission.runs import find_tests, newest

    found = find_tests([logs])
    assert not found.unfinished and not found.unreadable
    assert newest(found.tests)[("bert-99", "Offline", TestMode.AccuracyOnly)].directory == scenario / "accuracy"

    # The next run starts from the engine that passed: no run of the engine that missed.
    again_logs = tmp_path / "again"
    again = run(repo, tuned, "--system_name=LadderBox", *ORACLE, *SHORT_OFFLINE, f"--log_dir={again_logs}")
    assert again.returncode == 0, again.stdout[-4000:]
    assert [p.name for p in (again_logs / "gate").iterdir()] == ["exact"] and "missed the accuracy" not in again.stdout
    gate_run = metadata(again_logs / "gate" / "exact" / "LadderBox" / "bert-99" / "Offline")
    assert gate_run["result"]["mode"] == "AccuracyOnly" and gate_run["result"]["valid"] is True
    assert "shifted (F1 " in gate_run["engine"]["summary"] and "missed it before" not in gate_run["engine"]["summary"]
    performance = metadata(again_logs / "LadderBox" / "bert-99" / "Offline")
    assert performance["engine"]["engine"] == "exact" and performance["result"]["mode"] == "PerformanceOnly"
    assert json.loads(records.read_text()) == record  # nothing new missed


def test_run_args_that_name_the_engine_skip_the_ladder(repo, tmp_path):
    tuned, logs = tmp_path / "tuned", tmp_path / "logs"
    done = run(repo, tuned, "--system_name=LadderBox", *ORACLE, *SHORT_OFFLINE, "--oracle_shift=0",
               f"--log_dir={logs}")
    assert done.returncode == 0, done.stdout[-4000:]
    assert not (logs / "gate").exists() and not tuned.exists()  # no accuracy run, nothing stored
    engine = metadata(logs / "LadderBox" / "bert-99" / "Offline")["engine"]
    assert (engine["engine"], engine["gate"]) == ("exact", "skipped")
    assert ("      engine: exact, given in RUN_ARGS (--oracle_shift=0 --backend=oracle): the engine ladder (shifted, "
            "exact) and its accuracy gate are skipped") in done.stdout
    assert "GATE bert-99: the accuracy gate of a real submission is the AccuracyOnly run on the real checkpoint and " \
           "data set, not this run (RUN_ARGS chose the engine: the ladder's gate was skipped)" in done.stdout


def test_a_miss_of_the_last_engine_ends_the_run_with_exit_3_and_the_fix(repo, tmp_path):
    tuned, logs = tmp_path / "tuned", tmp_path / "logs"
    done = run(repo, tuned, "--system_name=MissBox", "--test_mode=SubmissionRun", *ORACLE, *SHORT_OFFLINE,
               f"--log_dir={logs}")
    assert done.returncode == 3, done.stdout[-4000:]
    records = tuned / "MissBox" / "bert-99" / "Offline.misses.json"
    assert [miss["engine"] for miss in json.loads(records.read_text())["misses"]] == ["three", "two"]
    assert "engine two missed the accuracy target" in done.stdout and "it was the ladder's last engine" in done.stdout
    fix = re.search(r"  Exit status 3: every engine of the ladder of bert-99 Offline \(three, two\) missed the "
                    r"accuracy target on none \(oracle backend\): three \(F1 [\d.]+ below target 89.965\), "
                    r"two \(F1 [\d.]+ below target 89.965\); recorded in (\S+)\. .*check the checkpoint and the "
                    r"data set \(make download_model preprocess_data BENCHMARKS=bert .*then delete \S+ to try the "
                    r"ladder again; or give the engine in RUN_ARGS \(--oracle_shift=\.\.\.\), which runs it "
                    r"without the gate\.",
                    done.stdout)
    assert fix and fix.group(1) == str(records), done.stdout[-4000:]
    assert not (logs / "MissBox" / "bert-99" / "Offline" / "performance").exists()  # the run ended there
    assert metadata(logs / "gate" / "two" / "MissBox" / "bert-99" / "Offline")["engine"]["next"] is None

    # Every engine has missed on this checkpoint: the next run ends at once, with the same fix, running nothing,
    # not even the tests of the benchmark after it.
    again = run(repo, tuned, "--system_name=MissBox", "--benchmarks=bert,gptj", "--backend=oracle",
                "--gpu_batch_size=4", *SHORT_OFFLINE, f"--log_dir={tmp_path / 'again'}")
    assert again.returncode == 3 and "Exit status 3: every engine of the ladder of bert-99 Offline" in again.stdout
    assert "which runs it without the gate; the 1 test(s) after it were not run." in again.stdout
    assert not (tmp_path / "again" / "gate").exists() and not (tmp_path / "again" / "MissBox").exists()


def test_a_changed_checkpoint_clears_the_record(repo, tmp_path):
    """The tiny BERT with a checkpoint file: a real model the gate judges (its random weights miss F1), a miss
    stored with the file's identity, and a rewritten file that makes the next run try the ladder again."""
    tuned, checkpoint = tmp_path / "tuned", tmp_path / "model.pytorch"
    torch.save(random_weights(BERT_CONFIGS["tiny"], 1).state_dict(), checkpoint)
    args = ["--system_name=TinyBox", "--test_mode=AccuracyOnly", f"--weights={checkpoint}"]
    first = run(repo, tuned, *args, f"--log_dir={tmp_path / 'first'}")
    assert first.returncode == 3 and "engine bf16 missed the accuracy target: F1 " in first.stdout, first.stdout[-4000:]
    records = tuned / "TinyBox" / "bert-99" / "Offline.misses.json"
    before = json.loads(records.read_text())
    assert before["checkpoint"] == str(checkpoint) and before["checkpoint_identity"][0]["file"] == "model.pytorch"
    assert metadata(tmp_path / "first" / "gate" / "bf16" / "TinyBox" / "bert-99" / "Offline")["provenance"][
        "weights"] == str(checkpoint)

    torch.save(random_weights(BERT_CONFIGS["tiny"], 2).state_dict(), checkpoint)  # another checkpoint, same path
    second = run(repo, tuned, *args, f"--log_dir={tmp_path / 'second'}")
    assert "the engines that missed were recorded for another checkpoint" in second.stdout
    assert "record cleared, the ladder starts at bf16" in second.stdout
    assert (tmp_path / "second" / "gate" / "bf16" / "TinyBox").is_dir()  # tried again
    after = json.loads(records.read_text())
    assert after["checkpoint_identity"] != before["checkpoint_identity"] and len(after["misses"]) == 1


def test_nothing_is_decided_on_synthetic_inputs_and_random_weights(repo, tmp_path):
    logs = tmp_path / "logs"
    done = run(repo, tmp_path / "tuned", "--system_name=TinyBox", "--input_data=synthetic", "--weights=random",
               "--synthetic_sample_count=32", "--min_duration=500", "--min_query_count=1",
               "--offline_expected_qps=6000", f"--log_dir={logs}")
    performance = metadata(logs / "TinyBox" / "bert-99" / "Offline")
    # its speed is not the point here (VALID or, on a much faster machine, INVALID): that it ran, and with what
    assert performance["result"]["valid"] is not None and done.returncode in (0, 3), done.stdout[-4000:]
    assert not (logs / "gate").exists() and not (tmp_path / "tuned").exists()
    engine = performance["engine"]
    assert (engine["engine"], engine["gate"]) == ("bf16", "not applied")
    assert ("engine: bf16, the ladder's first (bf16): the accuracy gate was not applied: synthetic inputs, random "
            "weights decide nothing about accuracy") in done.stdout
    assert "GATE bert-99: the accuracy gate was not applied" in done.stdout


def test_gptj_falls_back_on_a_miss_of_its_gen_len(repo, tmp_path):
    logs = tmp_path / "logs"
    done = run(repo, tmp_path / "tuned", "--system_name=LadderBox", "--benchmarks=gptj", "--backend=oracle",
               "--gpu_batch_size=4", "--test_mode=AccuracyOnly",
               f"--input_data={repo / 'build' / 'preprocessed_data' / GPTJ_TOKENIZED}", f"--log_dir={logs}")
    assert done.returncode == 0, done.stdout[-4000:]
    assert re.search(r"gptj-99 Offline: engine cut missed the accuracy target: GEN_LEN \d+ < [\d.]+; recorded in ",
                     done.stdout), done.stdout[-4000:]
    (miss,) = json.loads((tmp_path / "tuned" / "LadderBox" / "gptj-99" / "Offline.misses.json").read_text())["misses"]
    assert miss["engine"] == "cut" and miss["values"]["oracle_drop"] == 40
    passed = metadata(logs / "LadderBox" / "gptj-99" / "Offline")
    assert passed["engine"]["engine"] == "whole" and passed["result"]["accuracy"]["rouge1"] == 100.0
    assert metadata(logs / "gate" / "cut" / "LadderBox" / "gptj-99" / "Offline")["result"]["verdict"] == "FAIL"


def test_find_performance_measures_the_engine_that_passed(repo, tmp_path):
    tuned = tmp_path / "tuned"
    done = run(repo, tuned, "--find_performance", "--system_name=LadderBox", *ORACLE, "--min_duration=1000",
               f"--log_dir={tmp_path / 'find'}")
    assert done.returncode == 0, done.stdout[-4000:]
    assert "engine shifted missed the accuracy target" in done.stdout
    (stored,) = json.loads((tuned / "LadderBox" / "bert-99" / "Offline.json").read_text())["values"]
    assert stored["engine"] == "exact" and stored["value"] > 0
    assert "      engine: exact: passed the accuracy gate" in done.stdout
    tries = [json.loads(path.read_text()) for path in (tmp_path / "find" / "find_performance").rglob("metadata.json")]
    assert tries and all(each["config"]["fields"]["oracle_shift"] == 0 for each in tries)
