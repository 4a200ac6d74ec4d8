"""Per-model environments in a real image, served by the real tritonserver and pushed to the real
registry: models pin one package apart, a changed dependency re-tests its model, a push uploads
only the distribution that changed, console scripts run in the environment, and a poisoned cache
never ships."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile

import pytest

from support.models import PYTHON_MODEL, golden_case, python_model_files
from support.stack import BASE_IMAGE
from support.wheels import make_wheel, offline_index
from triton_release import steps
from triton_release.contract import ENVIRONMENTS_LABEL
from triton_release.models.repository import Repository
from triton_release.registry.client import RegistryRepository
from triton_release.settings import ServerOptions

pytestmark = pytest.mark.integration


def needing(model: str, version: str, requirements: str) -> dict[str, str]:
    """A model whose model.py refuses to load unless `shared` is at `version`."""
    files = python_model_files(model)
    files[f"{model}/1/model.py"] = (
        f"import shared\n\nassert shared.__version__ == {version!r}, shared.__version__\n\n" + PYTHON_MODEL
    )
    files[f"{model}/requirements.txt"] = requirements
    return files


@pytest.fixture
def index(tmp_path, monkeypatch):
    """Wheels made here, and a cache folder of the test's own (one test poisons it)."""
    monkeypatch.setenv("TRITON_RELEASE_CACHE", str(tmp_path / "cache"))
    folder = tmp_path / "index"
    for version in ("1.0", "2.0"):
        make_wheel(folder, "shared", version)
    offline_index(monkeypatch, folder)
    return folder


def test_two_models_pinning_one_package_apart_both_pass_in_one_image(make_repo, index, unique, image_tags):
    repo = Repository.load(
        make_repo(
            {
                **needing("old", "1.0", "shared==1.0\n"),
                **needing("new", "2.0", "shared==2.0\n"),
                **python_model_files("plain"),
            }
        )
    )
    tag = f"trt-envs/apart:{unique}"
    image_tags.append(tag)
    built = steps.build(repo, BASE_IMAGE, tag)
    assert {m: e.packages for m, e in built.environments.by_model.items()} == {
        "old": {"shared": "1.0"},
        "new": {"shared": "2.0"},
    }
    run = steps.test(repo, tag, ["new", "old", "plain"], server_options=ServerOptions(load_timeout=60))
    assert run.passed and len(run.cases) == 3
    assert (repo["old"].path / "config.pbtxt").read_text() == python_model_files("old")["old/config.pbtxt"]


@pytest.fixture
def released(git_repo, releaser, index, tmp_path):
    """Model a needs `tool` (which needs any `shared`), b pins shared 1.0, c needs nothing:
    released once as 1.0.0 while the index holds shared 1.0 only."""
    (index / "shared-2.0-py3-none-any.whl").rename(tmp_path / "shared-2.0-py3-none-any.whl")
    make_wheel(index, "tool", "0.1", requires=("shared",))
    files = {**needing("a", "1.0", "tool\n"), **needing("b", "1.0", "shared==1.0\n"), **python_model_files("c")}
    files["a/1/model.py"] = files["a/1/model.py"].replace(
        "assert shared.__version__ == '1.0', shared.__version__", "import tool"
    )
    git_repo.write(files)
    git_repo.commit("three models")
    releaser()
    return git_repo, releaser, tmp_path / "shared-2.0-py3-none-any.whl"


def new_layers(registry: RegistryRepository, before: str, after: str) -> list[dict]:
    old = {layer["digest"] for layer in registry.manifest(before).layers}
    return [layer for layer in registry.manifest(after).layers if layer["digest"] not in old]


def test_a_dependency_change_retests_its_model_and_ships_only_that_distribution(released, index):
    git_repo, release, shared2 = released
    registry = release.registry
    first = json.loads(registry.image_config("1.0.0")["config"]["Labels"][ENVIRONMENTS_LABEL])
    assert sorted(first) == ["a", "b"]
    shared2.rename(index / shared2.name)  # the index now offers shared 2.0: a's environment moves
    (git_repo.models / "c" / "golden" / "basic.json").write_text(golden_case(atol=1e-5))
    git_repo.commit("c: a golden tweak only")
    report = release()
    assert report["version"] == "1.0.1" and report["environment_changed_models"] == ["a"]
    assert report["steps"]["push"]["pushed_by"] == "registry"  # the previous release's blobs reused, no fallback
    assert report["steps"]["bump"]["bumps"] == []
    assert sorted(c["case"] for c in report["steps"]["test"]["cases"]) == ["a/basic", "c/basic"]
    assert report["steps"]["environments"]["environments"]["models"]["a"]["packages"] == {
        "shared": "2.0",
        "tool": "0.1",
    }
    added = new_layers(registry, "1.0.0", "1.0.1")
    shared_layer = max(added, key=lambda layer: layer["size"])
    assert len(added) == 2 and sum(layer["size"] for layer in added) - shared_layer["size"] < 1024  # a's activate

    # b moves to shared 2.0 too: the distribution is in the registry already, b's files and activate go up
    (git_repo.models / "b" / "requirements.txt").write_text("shared==2.0\n")
    model_py = git_repo.models / "b" / "1" / "model.py"
    model_py.write_text(model_py.read_text().replace("'1.0'", "'2.0'"))
    git_repo.commit("b: shared 2.0")
    report = release()
    assert report["version"] == "1.1.0" and report["steps"]["push"]["pushed_by"] == "registry"  # b's folder 2 is new
    added = new_layers(registry, "1.0.1", "1.1.0")
    assert shared_layer["digest"] not in {layer["digest"] for layer in added}
    assert all(layer["size"] < 4096 for layer in added)


CLI_MODEL = """\
import shutil
import subprocess

# the environment's bin is first on PATH (its activate), and its console script runs in it
found = shutil.which("shared-version")
assert found == "/opt/triton-release/envs/cli/bin/shared-version", found
shown = subprocess.run([found], capture_output=True, text=True, check=True).stdout.split()
assert shown == [found, "2.0"], shown

"""


def test_a_requirements_console_script_runs_in_the_models_environment(make_repo, index, unique, image_tags):
    entry_points = "[console_scripts]\nshared-version = shared_cli:show\n"
    make_wheel(
        index,
        "shared-cli",
        "1.0",
        {
            "shared_cli/__init__.py": "import shared, sys\n\ndef show():\n    print(sys.argv[0], shared.__version__)\n",
            "shared_cli-1.0.dist-info/entry_points.txt": entry_points,
        },
        requires=("shared",),
    )
    files = python_model_files("cli")
    files["cli/1/model.py"] = CLI_MODEL + PYTHON_MODEL
    files["cli/requirements.txt"] = "shared-cli==1.0\nshared==2.0\n"
    repo = Repository.load(make_repo(files))
    tag = f"trt-envs/scripts:{unique}"
    image_tags.append(tag)
    steps.build(repo, BASE_IMAGE, tag)
    run = steps.test(repo, tag, ["cli"], server_options=ServerOptions(load_timeout=60))
    assert run.passed and len(run.cases) == 1


def read_from_image(docker_client, image: str, path: str) -> bytes:
    container = docker_client.containers.create(image, command=["true"], entrypoint=[])
    try:
        stream, _ = container.get_archive(path)
        with tarfile.open(fileobj=io.BytesIO(b"".join(stream))) as tar:
            return tar.extractfile(path.rsplit("/", 1)[1]).read()
    finally:
        container.remove(force=True)


def test_a_poisoned_cache_never_ships(released, index, tmp_path, docker_client):
    """The cache restored on a fresh runner holds an unpacked wheel someone edited: the next release
    of another model ships the wheel's own bytes, not the edit (its model's tests still stand)."""
    git_repo, release, _ = released
    wheel = index / "shared-1.0-py3-none-any.whl"
    sha = hashlib.sha256(wheel.read_bytes()).hexdigest()
    module = tmp_path / "cache" / "dists" / sha / "shared" / "__init__.py"
    genuine = module.read_bytes()
    module.write_text("__version__ = '1.0'\nimport os  # anything at all, under the wheel's name\n")
    docker_client.images.remove(f"{release.target}:candidate", force=True)  # a fresh runner's daemon
    model_py = git_repo.models / "c" / "1" / "model.py"
    model_py.write_text(model_py.read_text() + "# c changes\n")
    git_repo.commit("c: a change")
    report = release()
    assert report["version"] == "1.1.0"
    shipped = f"{release.target}:1.1.0"
    docker_client.images.pull(shipped)
    try:
        in_image = read_from_image(
            docker_client, shipped, f"/opt/triton-release/dists/shared-1.0-{sha[:12]}/shared/__init__.py"
        )
    finally:
        docker_client.images.remove(shipped, force=True)
    assert in_image == genuine
    assert module.read_bytes() == genuine  # the cache entry was made again
