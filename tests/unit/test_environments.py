"""Per-model environments resolved offline from wheels made on the spot: each model its own set,
one content-addressed folder per wheel, the image's config.pbtxt given the parameter."""

from __future__ import annotations

import zipfile

import pytest

from support.models import python_model_files
from support.wheels import make_wheel, offline_index
from triton_release import cache
from triton_release.errors import Refused
from triton_release.image import environments, layers
from triton_release.image.base import PythonInstall
from triton_release.models.repository import Repository
from triton_release.models.validate import validate

INSTALL = PythonInstall("3.11", "/usr/bin/python3.11", "libpython3.11.so.1.0", "", "/usr/lib/python3/dist-packages", "")


@pytest.fixture
def index(tmp_path, monkeypatch):
    monkeypatch.setattr(cache, "_root", tmp_path / "cache")
    folder = tmp_path / "wheels"
    for version in ("1.0", "2.0"):
        make_wheel(folder, "shared", version)
    make_wheel(folder, "tool", "0.1", requires=("shared",))
    offline_index(monkeypatch, folder)
    return folder


def repo_with(make_repo, requirements: dict[str, str]) -> Repository:
    files = {}
    for model, text in requirements.items():
        files.update(python_model_files(model))
        if text is not None:
            files[f"{model}/requirements.txt"] = text
    return Repository.load(make_repo(files))


def test_two_models_pin_one_package_apart(make_repo, index):
    repo = repo_with(make_repo, {"old": "shared==1.0\n", "new": "shared==2.0\n", "plain": None})
    envs = environments.resolve(repo, INSTALL, "2.35")
    assert envs.by_model["old"].packages == {"shared": "1.0"}
    assert envs.by_model["new"].packages == {"shared": "2.0"}
    assert "plain" not in envs.by_model
    assert [d.ident.rsplit("-", 1)[0] for d in envs.distributions] == ["shared-1.0", "shared-2.0"]


def test_a_wheel_shared_by_models_is_one_distribution(make_repo, index):
    repo = repo_with(make_repo, {"a": "tool==0.1\n", "b": "shared==2.0\n"})
    envs = environments.resolve(repo, INSTALL, "2.35")
    assert envs.by_model["a"].packages == {"shared": "2.0", "tool": "0.1"}  # its dependency came too
    assert len(envs.distributions) == 2  # shared 2.0 once, for both
    folder = next(d for d in envs.distributions if d.name == "shared").folder
    assert (folder / "shared" / "__init__.py").read_text() == "__version__ = '2.0'\n"


def test_the_fingerprint_changes_with_the_resolution_and_names_the_model(make_repo, index, tmp_path):
    repo = repo_with(make_repo, {"a": "tool\n", "b": "shared==1.0\n"})
    before = environments.resolve(repo, INSTALL, "2.35")
    assert before.by_model["a"].packages["shared"] == "2.0"
    assert before.changed_since(before.label()) == [] and before.changed_since(None) == []
    (repo["a"].path / "requirements.txt").write_text("tool\nshared<2\n")
    after = environments.resolve(Repository.load(repo.root), INSTALL, "2.35")
    assert after.changed_since(before.label()) == ["a"]
    assert after.changed_since('{"a": "x", "gone": "y"}') == ["a", "b", "gone"]


def test_the_environment_is_a_virtual_environment_of_the_images_python(make_repo, index):
    repo = repo_with(make_repo, {"a": "tool==0.1\n"})
    env = environments.resolve(repo, INSTALL, "2.35").by_model["a"]
    files = env.files()
    home = "opt/triton-release/envs/a"
    assert files[f"{home}/pyvenv.cfg"].decode().splitlines() == [
        "home = /usr/bin", "include-system-site-packages = true", "version = 3.11"]
    assert 'export PATH="/opt/triton-release/envs/a/bin:$PATH"' in files[f"{home}/bin/activate"].decode()
    assert files[f"{home}/bin/python3"] == b'#!/bin/sh\nexec /usr/bin/python3.11 "$@"\n'
    assert isinstance(files[f"{home}/bin/python3"], layers.Executable)
    pth = files[f"{home}/lib/python3.11/site-packages/triton-release.pth"].decode()
    assert pth.splitlines() == [f"/opt/triton-release/dists/{d.ident}" for d in env.distributions]


def test_the_images_config_gets_the_parameter_and_the_users_file_stays(make_repo, index):
    repo = repo_with(make_repo, {"a": "shared==1.0\n"})
    original = (repo["a"].path / "config.pbtxt").read_text()
    envs = environments.resolve(repo, INSTALL, "2.35")
    items, configs = environments.environment_items(envs, repo)
    text = configs["a"]["config.pbtxt"].decode()
    assert text.startswith(original.rstrip("\n"))
    assert 'key: "EXECUTION_ENV_PATH" value: { string_value: "/opt/triton-release/envs/a" }' in text
    assert (repo["a"].path / "config.pbtxt").read_text() == original
    from google.protobuf import text_format
    from triton_release.models.config_schema import model_config_pb2
    parsed = text_format.Parse(text, model_config_pb2.ModelConfig())
    assert parsed.parameters["EXECUTION_ENV_PATH"].string_value == "/opt/triton-release/envs/a"
    assert sorted(i.key for i in items) == ["dist/" + envs.distributions[0].ident, "env/a"]


def test_an_auto_complete_model_gets_a_config_naming_its_backend(make_repo, index):
    repo = repo_with(make_repo, {"a": "shared==1.0\n"})
    (repo["a"].path / "config.pbtxt").unlink()
    repo = Repository.load(repo.root)
    envs = environments.resolve(repo, INSTALL, "2.35")
    text = environments.environment_items(envs, repo)[1]["a"]["config.pbtxt"].decode()
    assert text.startswith('backend: "python"\n')


def test_an_unresolvable_requirement_names_the_file_and_line(make_repo, index):
    repo = repo_with(make_repo, {"a": "# pinned\nshared==1.0\nnowhere-to-be-found==3\n"})
    with pytest.raises(Refused) as refused:
        environments.resolve(repo, INSTALL, "2.35")
    assert "nowhere-to-be-found==3 (" in str(refused.value) and "a/requirements.txt:3)" in str(refused.value)


def test_a_wheel_is_unpacked_as_pip_would_and_never_outside_its_folder(tmp_path, monkeypatch):
    monkeypatch.setattr(cache, "_root", tmp_path / "cache")
    wheel = make_wheel(tmp_path, "odd", "1.0", {"odd/__init__.py": "", "odd-1.0.data/purelib/extra.py": "x = 1\n",
                                                "odd-1.0.data/scripts/run": "#!/bin/sh\n"})
    dist = environments.unpack(wheel)
    assert (dist.folder / "extra.py").read_text() == "x = 1\n" and not (dist.folder / "run").exists()
    assert environments.unpack(wheel) == dist  # once per wheel
    evil = make_wheel(tmp_path / "evil", "evil", "1.0", {"evil/__init__.py": ""})
    with zipfile.ZipFile(evil, "a") as archive:
        archive.writestr("../../escape.py", "boom")
    with pytest.raises(Refused, match="outside its own folder"):
        environments.unpack(evil)
    assert not (tmp_path / "cache" / "escape.py").exists()


def test_validate_refuses_a_model_setting_its_own_environment_beside_requirements(make_repo):
    files = {**python_model_files("a"), "a/requirements.txt": "six==1.16.0\n"}
    files["a/config.pbtxt"] += ('\nparameters { key: "EXECUTION_ENV_PATH"\n'
                                '  value: { string_value: "$$TRITON_MODEL_DIRECTORY/env.tar.gz" } }\n')
    problems = validate(make_repo(files)).problems
    assert len(problems) == 1 and "EXECUTION_ENV_PATH" in problems[0].message and problems[0].line


def test_unpinned_requirements_follow_the_index_and_exact_pins_are_kept(make_repo, index, monkeypatch, tmp_path):
    make_wheel(index, "loose", "1.0")
    repo = repo_with(make_repo, {"a": "loose\n", "b": "shared==1.0\n"})
    before = environments.resolve(repo, INSTALL, "2.35")
    make_wheel(index, "loose", "1.1")  # the index moves
    after = environments.resolve(repo, INSTALL, "2.35")
    assert before.by_model["a"].packages == {"loose": "1.0"} and after.by_model["a"].packages == {"loose": "1.1"}
    assert after.changed_since(before.label()) == ["a"]
    offline_index(monkeypatch, tmp_path / "nothing")  # b's exact pins need no index again
    assert environments.resolve(repo, INSTALL, "2.35", models=["b"]).by_model["b"].packages == {"shared": "1.0"}
