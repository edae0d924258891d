"""System descriptions: our field lists are each round's official checker's, the checker and our check agree on
complete and broken descriptions, the shipped files hold no placeholder, and add_system + the user file get a new
system to a description the checker accepts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from code.common import systems
from code.common.rounds import ROUNDS, SYSTEM_TYPES
from code.common.system_description import (
    MEANINGFUL_FIELDS,
    REQUIRED_FIELDS,
    STATUSES,
    DescriptionFiles,
    SystemDescriptionError,
    description_problems,
    detected_fields,
    load_description,
    system_type,
)
from code.common.systems import DetectedSystem, GpuInfo, Storage, _cpu_topology, detect_driver, detect_storage
from scripts import add_system, check_system_json
from tests.common.test_rounds import official_checker  # the round's submission_checker.py, imported as it is
from tests.common.test_systems import H100, FakeNvml

# The rounds whose checker is a script with check_system_desc_id; v6.1's package checker shares their field lists.
SCRIPT_CHECKER_ROUNDS = [name for name, round_ in ROUNDS.items() if round_.tools.checker == ("submission_checker.py",)]
SHIPPED = sorted(path.stem for path in systems.SYSTEMS_DIR.glob("*.json") if not path.stem.endswith(".user"))
GPU_SYSTEMS = [name for name in SHIPPED if name != systems.CPU_SYSTEM]
# What only the submitter, or the machine that runs the benchmark, can say about a shipped DGX description.
SUBMITTER_VALUES = {
    "submitter": "MyOrg",
    "status": "available",
    "operating_system": "Ubuntu 22.04.4 LTS (Linux 5.15.0)",
    "framework": "PyTorch 2.13.0, CUDA 12.4",
    "other_software_stack": "Python 3.11.7, transformers 5.23.0, NVIDIA driver 550.54",
    "host_networking_topology": "N/A (single node)",
}


def checker_accepts(round_name: str, description: dict, submitter: str = "MyOrg") -> bool:
    """The official checker's own test of one system description (fields present, meaningful ones non-empty,
    submitter and division equal to the folders), as it runs it on a submission."""
    checker = official_checker(round_name)
    try:
        return bool(checker.check_system_desc_id("systems/X.json", description, submitter, "closed", round_name,
                                                 False))
    except AttributeError:  # it calls .lower() on the submitter: without one it stops there
        return False


def write_user_file(folder: Path, system: str, values: dict) -> None:
    (folder / f"{system}.user.json").write_text(json.dumps(values))


@pytest.fixture
def systems_copy(tmp_path, monkeypatch):
    """A copy of systems/ that SYSTEMS_DIR points at."""
    for path in systems.SYSTEMS_DIR.glob("*.json"):
        (tmp_path / path.name).write_text(path.read_text())
    monkeypatch.setattr(systems, "SYSTEMS_DIR", tmp_path)
    monkeypatch.delenv("SUBMITTER", raising=False)
    return tmp_path


@pytest.mark.parametrize("round_name", list(ROUNDS))
def test_field_lists_are_the_official_checkers(round_name):
    checker = official_checker(round_name)
    assert list(REQUIRED_FIELDS) == checker.SYSTEM_DESC_REQUIRED_FIELDS
    assert list(MEANINGFUL_FIELDS) == checker.SYSTEM_DESC_MEANINGFUL_RESPONSE_REQUIRED_FIELDS
    assert list(STATUSES) == checker.VALID_AVAILABILITIES


@pytest.mark.parametrize("round_name", SCRIPT_CHECKER_ROUNDS)
@pytest.mark.parametrize("system", GPU_SYSTEMS)
def test_shipped_gpu_descriptions_pass_once_the_submitter_answers(round_name, system, systems_copy):
    files = DescriptionFiles.of(system)
    base = json.loads(files.base.read_text())
    assert not checker_accepts(round_name, base)  # submitter, status, software: not facts of the hardware
    assert {p.split(":")[0] for p in description_problems(base, files)} == set(SUBMITTER_VALUES)

    write_user_file(systems_copy, system, SUBMITTER_VALUES)
    description = load_description(system)
    assert description_problems(description, files) == []
    assert checker_accepts(round_name, description)
    # Some round takes each benchmark from this system type (BERT on datacenter only in v4.1, GPT-J up to v5.0).
    kind = system_type(system)
    for benchmark in ("bert-99", "bert-99.9", "gptj-99", "gptj-99.9"):
        assert any(other.scenarios_for(kind, benchmark) for other in ROUNDS.values()), (kind, benchmark)


@pytest.mark.parametrize("system", SHIPPED)
def test_shipped_descriptions_hold_no_placeholder_or_empty_meaningful_field(system):
    base = json.loads((systems.SYSTEMS_DIR / f"{system}.json").read_text())
    assert "FILL_ME" not in json.dumps(base)
    assert all(base[name] for name in MEANINGFUL_FIELDS if name in base)
    assert set(REQUIRED_FIELDS) >= set(base) and base["system_type"] in SYSTEM_TYPES


@pytest.mark.parametrize("round_name", SCRIPT_CHECKER_ROUNDS)
def test_bad_descriptions(round_name, systems_copy):
    system = "H100_SXM_80GBx8"
    write_user_file(systems_copy, system, SUBMITTER_VALUES)
    files = DescriptionFiles.of(system)
    good = load_description(system)

    def problems(**changes):
        description = {**good, **changes}
        return description, description_problems({k: v for k, v in description.items() if v is not None}, files)

    missing, found = problems(cooling=None)
    assert not checker_accepts(round_name, {k: v for k, v in missing.items() if v is not None})
    assert found == [f'cooling: missing; set "cooling" in {files.user}']

    empty, found = problems(host_memory_configuration="")
    assert not checker_accepts(round_name, empty)
    assert len(found) == 1 and found[0].startswith("host_memory_configuration: empty, and the checker requires")

    placeholder, found = problems(host_storage_type="FILL_ME")
    assert checker_accepts(round_name, placeholder)  # the checker lets a placeholder through; we do not
    assert len(found) == 1 and found[0].startswith("host_storage_type: placeholder 'FILL_ME'; run `make add_system`")

    _, found = problems(system_type="cloud")
    assert found == [f"system_type: 'cloud' is not one of datacenter, edge, datacenter,edge; set \"system_type\" "
                     f"in {files.base} or {files.user}"]
    _, found = problems(status="shipping")
    assert found[0].startswith("status: 'shipping' is not one of available, preview, rdi")


def test_user_file_overrides_and_bad_user_files(systems_copy, monkeypatch):
    write_user_file(systems_copy, "CPU", {"system_type": "datacenter,edge", "cooling": None})
    assert system_type("CPU") == "datacenter,edge"  # runs and verdicts read the merged description
    assert "cooling" not in load_description("CPU")  # null: still asked
    monkeypatch.setenv("SUBMITTER", "EnvOrg")
    assert load_description("CPU")["submitter"] == "EnvOrg"
    assert load_description("CPU", submitter="ArgOrg")["submitter"] == "ArgOrg"

    write_user_file(systems_copy, "CPU", {"coolling": "air"})
    with pytest.raises(SystemDescriptionError, match=r"CPU.user.json: unknown field\(s\) coolling"):
        load_description("CPU")
    (systems_copy / "CPU.user.json").write_text("[1,")
    with pytest.raises(SystemDescriptionError, match="not valid JSON"):
        load_description("CPU")
    with pytest.raises(SystemDescriptionError, match="Nope.json is missing.*make add_system"):
        load_description("Nope")


def fake_machine(gpus: int = 2) -> DetectedSystem:
    gpu = GpuInfo(H100[0], H100[1], H100[2], "PCIe Gen5 x16")
    return DetectedSystem(gpus=(gpu,) * gpus, cpu_model="AMD EPYC 9654 96-Core Processor", cpu_cores=384,
                          memory_bytes=1536 * 2**30, cpu_sockets=2, cores_per_socket=96,
                          storage=(Storage("nvme0n1", 3_840_000_000_000, "NVMe SSD"),),
                          operating_system="Ubuntu 22.04.4 LTS (Linux 5.15.0)", driver_version="550.54.15",
                          cuda_version="12.4", software={"python": "3.11.7", "torch": "2.13.0"})


@pytest.mark.parametrize("round_name", SCRIPT_CHECKER_ROUNDS)
def test_add_system_then_user_file_then_the_checker_passes(round_name, systems_copy, capsys):
    done = add_system.write_description(fake_machine(), "MyBox_x2", "MyOrg", dry_run=False)
    assert done[0].endswith("MyBox_x2.json") and "values to fill in" in done[1]
    base = json.loads((systems_copy / "MyBox_x2.json").read_text())
    assert base["accelerator_model_name"] == "NVIDIA H100 80GB HBM3" and base["accelerators_per_node"] == "2"
    assert base["host_processor_core_count"] == "96" and base["accelerator_memory_configuration"] == "HBM3"
    assert base["framework"] == "PyTorch 2.13.0, CUDA 12.4"
    assert "NVIDIA driver 550.54.15" in base["other_software_stack"]
    user = json.loads((systems_copy / "MyBox_x2.user.json").read_text())
    asked = {"status", "host_memory_configuration", "host_networking", "host_networking_topology",
             "host_network_card_count", "accelerator_interconnect", "cooling"}
    assert user == {"submitter": "MyOrg", **dict.fromkeys(asked)}

    args = ["--system_name=MyBox_x2", f"--systems_dir={systems_copy}", f"--round={round_name}"]
    assert check_system_json.main(args) == 1
    out = capsys.readouterr().out
    assert all(f"  {name}: missing; set \"{name}\" in " in out for name in asked)

    answers = {name: "N/A" for name in asked} | {"status": "available", "cooling": "Air-cooled"}
    write_user_file(systems_copy, "MyBox_x2", {**user, **answers})
    assert check_system_json.main(args) == 0
    assert checker_accepts(round_name, load_description("MyBox_x2"))
    # Running add_system again keeps the answers.
    add_system.write_description(fake_machine(), "MyBox_x2", None, dry_run=False)
    assert json.loads((systems_copy / "MyBox_x2.user.json").read_text())["cooling"] == "Air-cooled"


def test_add_system_on_a_shipped_system_detects_the_software_only(systems_copy):
    done = add_system.write_description(fake_machine(gpus=8), "H100_SXM_80GBx8", None, dry_run=False)
    assert "left as is" in done[0]
    assert "warning: this machine's CPU is 'AMD EPYC 9654 96-Core Processor'" in done[1]
    user = json.loads((systems_copy / "H100_SXM_80GBx8.user.json").read_text())
    assert user == {"submitter": None, "status": None, "framework": "PyTorch 2.13.0, CUDA 12.4",
                    "operating_system": "Ubuntu 22.04.4 LTS (Linux 5.15.0)",
                    "other_software_stack": user["other_software_stack"], "host_networking_topology": None}


def test_detection_of_cpu_topology_storage_and_driver(tmp_path):
    cpuinfo = "".join(f"processor : {i}\nphysical id : {i // 4}\ncpu cores : 2\n\n" for i in range(8))
    assert _cpu_topology(cpuinfo) == (2, 2)
    assert _cpu_topology("processor : 0\n") == (0, 0)
    for name, sectors, rotational in (("nvme0n1", 7_500_000_000, "0"), ("sda", 1_000_000_000, "1"), ("loop0", 8, "0")):
        (tmp_path / name / "queue").mkdir(parents=True)
        (tmp_path / name / "size").write_text(f"{sectors}\n")
        (tmp_path / name / "queue" / "rotational").write_text(rotational)
    assert detect_storage(tmp_path) == (Storage("nvme0n1", 7_500_000_000 * 512, "NVMe SSD"),
                                        Storage("sda", 512_000_000_000, "HDD"))
    fields = detected_fields(DetectedSystem(storage=detect_storage(tmp_path)))
    assert fields["host_storage_capacity"] == "3.84 TB NVMe SSD, 512 GB HDD"
    assert fields["host_storage_type"] == "HDD, NVMe SSD" and fields["accelerator_model_name"] == "N/A"

    class DriverNvml(FakeNvml):
        def nvmlSystemGetDriverVersion(self):
            return "550.54.15"

        def nvmlSystemGetCudaDriverVersion(self):
            return 12040

    assert detect_driver(DriverNvml([H100])) == ("550.54.15", "12.4")
    assert detect_driver(FakeNvml([H100])) == ("", "")  # a driver NVML does not answer: nothing claimed
    assert detect_driver(FakeNvml([], fail="no NVML")) == ("", "")
