"""The Docker entry point of `make prebuild` (NVIDIA's target names): build the image, add the invoking user, run.

``python3 -m scripts.docker.launch build|add_user|run``, called by make/docker.mk with the host's system Python:
it needs only the standard library, because it runs before any environment of ours exists.

Why each rule:
- ``-it`` only with a terminal: without one Docker refuses ("the input device is not a TTY"), so a headless
  ``DOCKER_COMMAND`` runs without it, and an interactive shell without a terminal is refused with the fix.
- GPUs only where the NVIDIA container runtime is: elsewhere ``--gpus`` fails ("could not select device driver"),
  so the container starts on the CPU and says so.
- The container runs as the invoking uid/gid over the bind mount, so nothing it writes in build/ is root's.
- The image is labelled with a digest of what it was built from (Dockerfile, lock files); an image whose label
  differs was built from older requirements and is rebuilt, with a line saying so.
- The host's package index and certificates stay on the host: the host's pip fetches the locked files
  (hash-checked) into a wheelhouse under build/docker/, which the image installs from with ``--no-index``.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import pwd
import shlex
import shutil
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
CONTAINER_REPO = "/work"  # where NVIDIA's harness mounts the repo; the docs and Makefiles assume it
LABEL = "mlperf.requirements"
BASE_LABEL = "mlperf.base"
# Files whose content decides what the image holds: a change to any makes an existing image stale.
IMAGE_INPUTS = ("docker/Dockerfile", "requirements.lock", "requirements-assets.lock")
CONTAINER_CA = "/etc/ssl/certs/host-ca-bundle.crt"
NATIVE_FALLBACK = 'make setup && make run RUN_ARGS="--benchmarks=bert --scenarios=offline --test_run"'


class DockerSetupError(RuntimeError):
    """A bad input or missing piece, with the fix in the message; ends the command with exit status 2."""


@dataclass(frozen=True)
class Host:
    """What the run command depends on, gathered once so the argument assembly is a pure function."""

    tty: bool
    nvidia_runtime: bool
    uid: int
    gid: int
    repo: Path
    scratch: Path | None = None
    docker_args: str = ""
    nvidia_visible_devices: str = ""
    ca_bundle: Path | None = None


def requirements_id(repo: Path = REPO_ROOT) -> str:
    """Digest of the files an image is built from; the image carries it as a label to detect staleness."""
    digest = hashlib.sha256()
    for name in IMAGE_INPUTS:
        digest.update(name.encode() + b"\0" + (repo / name).read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def stale_message(image: str, label: str | None, current: str) -> str | None:
    """None when the image was built from the current inputs, else the line that says it is being rebuilt."""
    if label == current:
        return None
    if label is None:
        return f"{image} has no {LABEL} label (built by hand or by an older flow): rebuilding it"
    return f"{image} was built from older requirements ({LABEL}={label}, now {current}): rebuilding it"


def check_scratch(raw: str | None, access: Callable[[str, int], bool] = os.access) -> Path | None:
    """MLPERF_SCRATCH_PATH, validated before Docker is asked: it is mounted at its own path and must be writable.

    Docker would create a missing host folder as root, which the invoking user then cannot write; so a missing
    folder is refused here with the command that creates it.
    """
    if not raw:
        return None
    path = Path(os.path.expanduser(raw))
    if not path.is_absolute():
        raise DockerSetupError(
            f"MLPERF_SCRATCH_PATH={raw} is relative: give an absolute path, e.g. {Path.cwd() / raw}"
        )
    if not path.exists():
        raise DockerSetupError(
            f"MLPERF_SCRATCH_PATH={path} does not exist: create it (mkdir -p {path}) or unset MLPERF_SCRATCH_PATH"
        )
    if not path.is_dir():
        raise DockerSetupError(f"MLPERF_SCRATCH_PATH={path} is not a folder: point it at a folder")
    if not access(str(path), os.W_OK | os.X_OK):
        raise DockerSetupError(
            f"MLPERF_SCRATCH_PATH={path} is not writable by uid {os.getuid()}: "
            f"chown it to yourself (sudo chown -R $(id -u):$(id -g) {path}) or point MLPERF_SCRATCH_PATH elsewhere"
        )
    return path


def gpu_args(host: Host) -> tuple[list[str], list[str]]:
    """The GPU flags and the notes to print: GPUs only with the NVIDIA runtime, a subset by NVIDIA_VISIBLE_DEVICES."""
    if not host.nvidia_runtime:
        notes = [
            "note: this Docker engine has no NVIDIA container runtime: starting a CPU-only container "
            "(for GPUs install nvidia-container-toolkit, then `nvidia-ctk runtime configure --runtime=docker` "
            "and restart the engine)"
        ]
        if host.nvidia_visible_devices:
            notes.append(f"note: NVIDIA_VISIBLE_DEVICES={host.nvidia_visible_devices} is ignored without it")
        return [], notes
    devices = host.nvidia_visible_devices
    if devices and devices != "all":
        # Docker's --gpus takes a CSV list, so a list of devices is quoted: "device=0,1".
        return [f'--gpus="device={devices}"', "-e", f"NVIDIA_VISIBLE_DEVICES={devices}"], []
    return ["--gpus=all"] + (["-e", "NVIDIA_VISIBLE_DEVICES=all"] if devices else []), []


def run_args(host: Host, image: str, command: str | None) -> tuple[list[str], list[str]]:
    """The `docker run` command line for an interactive shell (command None) or a headless command, and notes."""
    if command is None and not host.tty:
        raise DockerSetupError(
            "no terminal (stdin/stdout is not a TTY), so no interactive shell can open: run a command headless "
            'instead, e.g. make launch_docker DOCKER_COMMAND="make run RUN_ARGS=\'--benchmarks=bert '
            "--scenarios=offline --test_run'\""
        )
    argv = ["docker", "run", "--rm"]
    # -it needs a terminal on both ends; a headless run without one would be refused by Docker.
    if host.tty:
        argv.append("-it")
    gpus, notes = gpu_args(host)
    argv += gpus
    argv += ["--user", f"{host.uid}:{host.gid}", "--net", "host", "--shm-size=32g"]
    argv += ["-v", f"{host.repo}:{CONTAINER_REPO}", "-w", CONTAINER_REPO]
    if host.scratch is not None:
        argv += ["-v", f"{host.scratch}:{host.scratch}", "-e", f"MLPERF_SCRATCH_PATH={host.scratch}"]
    if host.ca_bundle is not None:
        # make build fetches LoadGen's sdist over HTTPS: the host's certificates are lent read-only at run time,
        # never copied into the image.
        argv += ["-v", f"{host.ca_bundle}:{CONTAINER_CA}:ro"]
        for var in ("SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "PIP_CERT"):
            argv += ["-e", f"{var}={CONTAINER_CA}"]
    argv += shlex.split(host.docker_args)
    argv.append(image)
    argv += ["bash", "-c", command] if command is not None else ["bash"]
    return argv, notes


def host_ca_bundle(environ: dict[str, str]) -> Path | None:
    """The host's CA bundle (SSL_CERT_FILE, else Debian's), lent to the container so HTTPS works as on the host."""
    for candidate in (environ.get("SSL_CERT_FILE"), "/etc/ssl/certs/ca-certificates.crt"):
        if candidate and Path(candidate).is_file():
            return Path(candidate)
    return None


def user_image(image: str, uid: int) -> str:
    """The per-user image docker_add_user makes from the harness image (the harness image itself for root)."""
    if uid == 0:
        return image
    repo, _, tag = image.rpartition(":") if ":" in image.split("/")[-1] else (image, "", "latest")
    return f"{repo}:{tag}-uid{uid}"


def _docker(args: Sequence[str], capture: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["docker", *args], capture_output=capture, text=True, check=False)


def engine_info() -> str:
    """`docker info`'s runtimes, or a DockerSetupError naming the fix when no engine answers."""
    if shutil.which("docker") is None:
        raise DockerSetupError(
            f"the docker command is not installed: install Docker (apt-get install docker.io), or use the native "
            f"path: {NATIVE_FALLBACK}"
        )
    done = _docker(["info", "--format", "{{json .Runtimes}}"])
    if done.returncode != 0:
        why = (done.stderr.strip().splitlines() or ["no answer"])[-1]
        fix = (
            "add yourself to the docker group (sudo usermod -aG docker $USER, then log in again)"
            if "permission denied" in why.lower()
            else "start the engine (sudo systemctl start docker, or sudo dockerd &)"
        )
        raise DockerSetupError(f"no Docker engine is reachable ({why}): {fix}; or use the native path: "
                               f"{NATIVE_FALLBACK}")
    return done.stdout


def has_nvidia_runtime(runtimes_json: str) -> bool:
    """Whether --gpus can work: the engine lists an nvidia runtime, or the toolkit's prestart hook is installed."""
    return '"nvidia"' in runtimes_json or shutil.which("nvidia-container-runtime-hook") is not None


def image_label(image: str, label: str = LABEL) -> tuple[bool, str | None]:
    """(exists, value of the label) of a local image."""
    done = _docker(["image", "inspect", "--format", "{{index .Config.Labels \"" + label + "\"}}", image])
    if done.returncode != 0:
        return False, None
    value = done.stdout.strip()
    return True, (value if value and value != "<no value>" else None)


def probe_base(base: str) -> tuple[str, bool]:
    """(python X.Y, has torch) of the base image; a base without python3 is refused with the fix."""
    script = "import sys, importlib.util as u; print('%d.%d' % sys.version_info[:2], int(bool(u.find_spec('torch'))))"
    done = _docker(["run", "--rm", "--entrypoint", "python3", base, "-c", script])
    if done.returncode != 0:
        err = done.stderr.strip()
        if "executable file not found" in err or "no such file" in err.lower():
            raise DockerSetupError(
                f"base image {base} has no python3: choose a base with Python 3.11 or newer, e.g. an NVIDIA PyTorch "
                "image, or the local Debian base: make docker_base, then BASE_IMAGE=mlperf-base:bookworm"
            )
        lines = err.splitlines() or ["no message"]
        why = next((line for line in lines if "Error" in line or "error" in line), lines[-1])
        raise DockerSetupError(
            f"base image {base} cannot be used ({why}): without registry access give a "
            "local one: make docker_base, then BASE_IMAGE=mlperf-base:bookworm (docker images lists yours)"
        )
    version, torch = done.stdout.split()
    return version, torch == "1"


def image_lock(lock_text: str, keep_torch: bool) -> str:
    """The runtime lock for the image: without torch (and its hashes) when the base brings its own CUDA build."""
    if keep_torch:
        return lock_text
    out, skipping = [], False
    for line in lock_text.splitlines():
        if line.startswith("torch=="):
            skipping = True
            continue
        if skipping and line.startswith("    --hash="):
            continue
        skipping = False
        out.append(line)
    return "\n".join(out) + "\n"


def fill_wheelhouse(wheelhouse: Path, python: str, base_has_torch: bool, host_python: str) -> None:
    """The host's pip downloads every locked file (hash-checked) for the base's Python into the wheelhouse."""
    wheelhouse.mkdir(parents=True, exist_ok=True)
    (wheelhouse / "requirements.lock").write_text(
        image_lock((REPO_ROOT / "requirements.lock").read_text(), keep_torch=not base_has_torch)
    )
    shutil.copyfile(REPO_ROOT / "requirements-assets.lock", wheelhouse / "requirements-assets.lock")
    host_version = f"{sys.version_info[0]}.{sys.version_info[1]}"
    cross = [] if python == host_version else ["--python-version", python]
    for lock in ("requirements.lock", "requirements-assets.lock"):
        cmd = [host_python, "-m", "pip", "download", "-q", "--no-deps", "--require-hashes", *cross,
               "-d", str(wheelhouse), "-r", str(wheelhouse / lock)]
        if subprocess.run(cmd, check=False).returncode != 0:
            raise DockerSetupError(
                f"the host's pip could not fetch the locked packages for Python {python} (above): `{host_python} -m "
                "pip` must work (apt-get install python3-pip) with the host's settings (pip config list: index, "
                "certificates); the locks are for Python 3.11 (regenerate them with scripts/docker/lock.sh)"
            )


def build(image: str, base: str) -> None:
    """build_docker: (re)build the image when it is missing or stale; otherwise say it is up to date."""
    engine_info()
    current = requirements_id()
    exists, label = image_label(image)
    if exists:
        message = stale_message(image, label, current)
        built_from = image_label(image, BASE_LABEL)[1]
        if message is None and built_from not in (None, base):
            message = f"{image} was built FROM {built_from}, now BASE_IMAGE={base}: rebuilding it"
        if message is None:
            print(f"[build_docker] {image} is up to date ({LABEL}={current}, FROM {built_from})")
            return
        print(f"[build_docker] {message}")
    python, base_has_torch = probe_base(base)
    wheelhouse = REPO_ROOT / "build" / "docker" / f"wheelhouse-py{python}"
    print(f"[build_docker] base {base}: Python {python}, "
          + ("its own torch is kept" if base_has_torch else "torch from requirements.lock"))
    fill_wheelhouse(wheelhouse, python, base_has_torch, sys.executable)
    cmd = ["docker", "build", "-f", str(REPO_ROOT / "docker" / "Dockerfile"), "-t", image,
           "--build-arg", f"BASE_IMAGE={base}", "--build-arg", f"WHEELHOUSE={wheelhouse.relative_to(REPO_ROOT)}",
           "--build-arg", f"REQUIREMENTS_ID={current}", str(REPO_ROOT)]
    print("[build_docker] " + shlex.join(cmd), flush=True)
    if subprocess.run(cmd, check=False).returncode != 0:
        raise DockerSetupError(f"docker build of {image} failed (above); docs: documentation/FAQ.md")


def add_user(image: str, uid: int, gid: int, name: str) -> str:
    """docker_add_user: a thin image with the invoking user (name, uid, gid, home), so the shell is not uid-less."""
    target = user_image(image, uid)
    if uid == 0:
        print("[docker_add_user] invoked as root: the harness image is used as it is")
        return target
    cmd = ["docker", "build", "-q", "-f", str(REPO_ROOT / "docker" / "Dockerfile.user"), "-t", target,
           "--build-arg", f"BASE_IMAGE={image}", "--build-arg", f"USER_NAME={name}",
           "--build-arg", f"USER_UID={uid}", "--build-arg", f"USER_GID={gid}", str(REPO_ROOT / "docker")]
    # Quiet unless it fails: the legacy builder's deprecation notice on every shell is noise.
    done = subprocess.run(cmd, check=False, capture_output=True, text=True)
    if done.returncode != 0:
        print(done.stdout + done.stderr, file=sys.stderr)
        raise DockerSetupError(f"adding user {name} ({uid}:{gid}) to {image} failed (above)")
    print(f"[docker_add_user] {target}: user {name} ({uid}:{gid})")
    return target


def gather_host(environ: dict[str, str], repo: Path, uid: int, gid: int, tty: bool) -> Host:
    """The facts `run_args` needs, read from the engine, the environment and the terminal."""
    runtimes = engine_info()
    return Host(
        tty=tty,
        nvidia_runtime=has_nvidia_runtime(runtimes),
        uid=uid,
        gid=gid,
        repo=repo,
        scratch=check_scratch(environ.get("MLPERF_SCRATCH_PATH")),
        docker_args=environ.get("DOCKER_ARGS", ""),
        nvidia_visible_devices=environ.get("NVIDIA_VISIBLE_DEVICES", ""),
        ca_bundle=host_ca_bundle(environ),
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Subcommands of make/docker.mk; a DockerSetupError prints one ERROR line with the fix and exits 2."""
    parser = argparse.ArgumentParser(prog="python3 -m scripts.docker.launch", description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=("build", "add_user", "run"))
    parser.add_argument("--image", default="mlperf-harness:latest")
    parser.add_argument("--base", default="")
    parser.add_argument("--repo", type=Path, default=REPO_ROOT, help="folder mounted at /work (default: this repo)")
    parser.add_argument("--uid", type=int, default=os.getuid())
    parser.add_argument("--gid", type=int, default=os.getgid())
    parser.add_argument("--command", default=None, help="run headless: the command (DOCKER_COMMAND)")
    args = parser.parse_args(argv)
    try:
        if args.action == "build":
            build(args.image, args.base)
        elif args.action == "add_user":
            try:
                name = pwd.getpwuid(args.uid).pw_name
            except KeyError:
                name = f"user{args.uid}"
            add_user(args.image, args.uid, args.gid, name)
        else:
            tty = sys.stdin.isatty() and sys.stdout.isatty()
            host = gather_host(dict(os.environ), args.repo.resolve(), args.uid, args.gid, tty)
            cmd, notes = run_args(host, user_image(args.image, args.uid), args.command or None)
            for note in notes:
                print(f"[launch_docker] {note}", file=sys.stderr)
            print("[launch_docker] " + shlex.join(cmd), file=sys.stderr, flush=True)
            return subprocess.run(cmd, check=False).returncode
    except DockerSetupError as exc:
        print(f"ERROR: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
