"""The Docker entry point's pure logic (scripts/docker/launch.py), without an engine: `make test_docker` is the
end-to-end check. Argument assembly (TTY, NVIDIA runtime, uid/gid, mounts), stale images, bad inputs."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from scripts.docker import launch, local_hashes
from scripts.docker.launch import DockerSetupError, Host

REPO = Path(__file__).resolve().parents[2]


def host(**changes) -> Host:
    base = dict(tty=False, nvidia_runtime=False, uid=1234, gid=5678, repo=Path("/src/harness"))
    base.update(changes)
    return Host(**base)


def pairs(argv: list[str], flag: str) -> list[str]:
    """Every value given to a flag that takes the next word (-v, -e)."""
    return [argv[i + 1] for i, word in enumerate(argv) if word == flag]


def test_headless_has_no_tty_flags_and_runs_the_command():
    argv, _ = launch.run_args(host(), "img:tag", "make build")
    assert "-it" not in argv and "-t" not in argv
    assert argv[-4:] == ["img:tag", "bash", "-c", "make build"]


def test_terminal_gets_it_and_a_shell():
    argv, _ = launch.run_args(host(tty=True), "img:tag", None)
    assert "-it" in argv
    assert argv[-2:] == ["img:tag", "bash"]


def test_no_terminal_and_no_command_names_the_headless_fix():
    with pytest.raises(DockerSetupError, match="DOCKER_COMMAND="):
        launch.run_args(host(tty=False), "img:tag", None)


def test_runs_as_the_invoking_user_with_the_repo_at_work():
    argv, _ = launch.run_args(host(), "img", "true")
    assert argv[argv.index("--user") + 1] == "1234:5678"
    assert "/src/harness:/work" in pairs(argv, "-v")
    assert argv[argv.index("-w") + 1] == "/work"


def test_no_nvidia_runtime_gives_a_cpu_container_and_a_note():
    argv, notes = launch.run_args(host(nvidia_visible_devices="0"), "img", "true")
    assert not any(word.startswith("--gpus") for word in argv)
    assert any("no NVIDIA container runtime" in n and "nvidia-container-toolkit" in n for n in notes)
    assert any("NVIDIA_VISIBLE_DEVICES=0 is ignored" in n for n in notes)


def test_nvidia_runtime_passes_all_gpus_or_the_chosen_ones():
    argv, notes = launch.run_args(host(nvidia_runtime=True), "img", "true")
    assert "--gpus=all" in argv and notes == []
    argv, _ = launch.run_args(host(nvidia_runtime=True, nvidia_visible_devices="0,2"), "img", "true")
    assert '--gpus="device=0,2"' in argv
    assert "NVIDIA_VISIBLE_DEVICES=0,2" in pairs(argv, "-e")


def test_scratch_is_mounted_at_its_own_path_and_docker_args_come_before_the_image(tmp_path):
    h = host(scratch=tmp_path, docker_args="-v /data:/data:ro --cpus 2", ca_bundle=Path("/etc/ca.crt"))
    argv, _ = launch.run_args(h, "img", "true")
    assert f"{tmp_path}:{tmp_path}" in pairs(argv, "-v")
    assert f"MLPERF_SCRATCH_PATH={tmp_path}" in pairs(argv, "-e")
    assert f"/etc/ca.crt:{launch.CONTAINER_CA}:ro" in pairs(argv, "-v")
    assert argv.index("--cpus") < argv.index("img") and "/data:/data:ro" in pairs(argv, "-v")


def test_scratch_missing_relative_or_unwritable_names_the_fix(tmp_path):
    assert launch.check_scratch(None) is None and launch.check_scratch("") is None
    with pytest.raises(DockerSetupError, match="mkdir -p"):
        launch.check_scratch(str(tmp_path / "absent"))
    with pytest.raises(DockerSetupError, match="absolute path"):
        launch.check_scratch("relative/dir")
    with pytest.raises(DockerSetupError, match="chown"):
        launch.check_scratch(str(tmp_path), access=lambda path, mode: False)
    assert launch.check_scratch(str(tmp_path)) == tmp_path


def test_stale_image_detection():
    assert launch.stale_message("img", "abc", "abc") is None
    assert "older requirements" in launch.stale_message("img", "abc", "def")
    assert "rebuilding" in launch.stale_message("img", None, "def")


def test_requirements_id_follows_the_lock(tmp_path):
    for name in launch.IMAGE_INPUTS:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(name)
    before = launch.requirements_id(tmp_path)
    (tmp_path / "requirements.lock").write_text("numpy==9\n")
    assert launch.requirements_id(tmp_path) != before


def test_image_lock_drops_torch_and_its_hashes_only_when_the_base_brings_torch():
    lock = "numpy==2 \\\n    --hash=sha256:aa\ntorch==2.13.0+cpu \\\n    --hash=sha256:bb\n    # via -r x\nzz==1\n"
    assert launch.image_lock(lock, keep_torch=True) == lock
    without = launch.image_lock(lock, keep_torch=False)
    assert "torch" not in without.replace("# via", "") and "bb" not in without
    assert "numpy==2" in without and "--hash=sha256:aa" in without and "zz==1" in without


def test_user_image_names():
    assert launch.user_image("mlperf-harness:latest", 1000) == "mlperf-harness:latest-uid1000"
    assert launch.user_image("registry:5000/h", 7) == "registry:5000/h:latest-uid7"
    assert launch.user_image("mlperf-harness:latest", 0) == "mlperf-harness:latest"


def test_no_engine_names_the_fix_and_the_native_path(monkeypatch, tmp_path):
    fake = tmp_path / "docker"
    fake.write_text("#!/bin/sh\necho 'Cannot connect to the Docker daemon' >&2\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    with pytest.raises(DockerSetupError, match=r"start the engine.*make setup"):
        launch.engine_info()
    assert launch.main(["run", "--command=true"]) == 2


def test_nvidia_runtime_detection():
    assert launch.has_nvidia_runtime('{"nvidia":{"path":"nvidia-container-runtime"},"runc":{}}')


def test_local_hashes_adds_the_picked_file_once():
    lock = "a-b==1 \\\n    --hash=sha256:11\n    # via x\nc==2 \\\n    --hash=sha256:22\n"
    out = local_hashes.add_hashes(lock, {"a_b": "33", "c": "22"})
    assert out == lock.replace("sha256:11\n", "sha256:11 \\\n    --hash=sha256:33\n")


def test_make_test_docker_skips_without_an_engine(tmp_path):
    fake = tmp_path / "docker"
    fake.write_text("#!/bin/sh\nexit 1\n")
    fake.chmod(0o755)
    env = {**os.environ, "PATH": f"{tmp_path}{os.pathsep}{os.environ['PATH']}"}
    done = subprocess.run([str(REPO / "scripts/docker/test_docker.sh")], env=env, capture_output=True, text=True,
                          check=False)
    assert done.returncode == 0
    assert done.stdout.strip().splitlines()[-1].startswith("SKIPPED")


def test_loadgen_extraction_without_tar_filters_refuses_what_the_data_filter_refuses(tmp_path):
    import io
    import tarfile

    from code.harness.fetch_loadgen import FetchError, checked_members

    def tarball(name: str, **fields) -> tarfile.TarFile:
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tar:
            info = tarfile.TarInfo(name)
            for key, value in fields.items():
                setattr(info, key, value)
            tar.addfile(info, io.BytesIO(b""))
        buf.seek(0)
        return tarfile.open(fileobj=buf)

    assert [m.name for m in checked_members(tarball("pkg/loadgen.cc"))] == ["pkg/loadgen.cc"]
    for bad in (tarball("../escape"), tarball("/abs"), tarball("pkg/l", type=tarfile.SYMTYPE, linkname="../../x"),
                tarball("pkg/dev", type=tarfile.CHRTYPE)):
        with pytest.raises(FetchError, match="unsafe member"):
            checked_members(bad)
