"""Per-model environments resolved offline from wheels made on the spot: each model its own set,
one content-addressed folder per wheel, the image's config.pbtxt given the parameter."""

from __future__ import annotations

import subprocess
import sys
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


def test_the_fingerprint_changes_with_the_resolution_and_names_the_model(make_repo, index):
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
        "home = /usr/bin",
        "include-system-site-packages = true",
        "version = 3.11",
    ]
    assert 'export PATH="/opt/triton-release/envs/a/bin:$PATH"' in files[f"{home}/bin/activate"].decode()
    assert files[f"{home}/bin/python3"] == b'#!/bin/bash\nexec -a "$0" /usr/bin/python3.11 "$@"\n'
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

    from triton_release.models.config.schema import model_config_pb2

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
    wheel = make_wheel(
        tmp_path,
        "odd",
        "1.0",
        {"odd/__init__.py": "", "odd-1.0.data/purelib/extra.py": "x = 1\n", "odd-1.0.data/scripts/run": "#!/bin/sh\n"},
    )
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
    files["a/config.pbtxt"] += (
        '\nparameters { key: "EXECUTION_ENV_PATH"\n  value: { string_value: "$$TRITON_MODEL_DIRECTORY/env.tar.gz" } }\n'
    )
    problems = validate(make_repo(files)).problems
    assert len(problems) == 1 and "EXECUTION_ENV_PATH" in problems[0].message and problems[0].line


def test_unpinned_requirements_follow_the_index_and_exact_pins_are_kept(make_repo, index, tmp_path):
    make_wheel(index, "loose", "1.0")
    repo = repo_with(make_repo, {"a": "loose\n", "b": "shared==1.0\n"})
    before = environments.resolve(repo, INSTALL, "2.35")
    make_wheel(index, "loose", "1.1")  # the index moves
    after = environments.resolve(repo, INSTALL, "2.35")
    assert before.by_model["a"].packages == {"loose": "1.0"} and after.by_model["a"].packages == {"loose": "1.1"}
    assert after.changed_since(before.label()) == ["a"]
    (index / "shared-1.0-py3-none-any.whl").rename(tmp_path / "away.whl")  # b's exact pins need no index again
    assert environments.resolve(repo, INSTALL, "2.35", models=["b"]).by_model["b"].packages == {"shared": "1.0"}


def test_a_kept_resolution_is_used_only_under_the_index_settings_it_was_made_under(
    make_repo, index, monkeypatch, tmp_path
):
    repo = repo_with(make_repo, {"b": "shared==1.0\n"})
    environments.resolve(repo, INSTALL, "2.35")
    asked = []
    run = subprocess.run
    monkeypatch.setattr(
        subprocess,
        "run",
        lambda command, **kw: (asked.append(command) if "download" in command else None) or run(command, **kw),
    )
    environments.resolve(repo, INSTALL, "2.35")
    assert asked == []  # the settings it was made under: kept, pip not asked
    elsewhere = tmp_path / "another-index"
    make_wheel(elsewhere, "shared", "2.0")
    monkeypatch.setenv("PIP_FIND_LINKS", str(elsewhere))  # another index, which has no shared 1.0: asked again
    with pytest.raises(Refused, match="No wheel of shared==1.0"):
        environments.resolve(repo, INSTALL, "2.35")
    monkeypatch.setenv("PIP_FIND_LINKS", str(index))
    constraints = tmp_path / "constraints.txt"
    for name, value in (
        ("PIP_INDEX_URL", "https://mirror.example/simple"),
        ("PIP_EXTRA_INDEX_URL", "https://extra.example/simple"),
        ("PIP_CONSTRAINT", str(constraints)),
    ):
        constraints.write_text("shared==1.0\n")
        monkeypatch.setenv(name, value)
        asked.clear()
        assert environments.resolve(repo, INSTALL, "2.35").by_model["b"].packages == {"shared": "1.0"}
        assert len(asked) == 1, name  # asked again under these settings ...
        environments.resolve(repo, INSTALL, "2.35")
        assert len(asked) == 1, name  # ... and kept under them
    constraints.write_text("shared==1.0\n# edited\n")  # a constraint file's text counts too
    environments.resolve(repo, INSTALL, "2.35")
    assert len(asked) == 2


# -- the image's Python, not the tool's ---------------------------------------------------------


def python(version: str) -> PythonInstall:
    return PythonInstall(version, f"/usr/bin/python{version}", f"libpython{version}.so.1.0", "", "", "")


def test_markers_are_evaluated_for_the_images_python_not_the_tools(make_repo, index):
    assert sys.version_info[:2] == (3, 11)  # the tool's own Python; the images' below are others
    make_wheel(index, "gated", "0.1", requires=('shared==2.0; python_version >= "3.12"',))
    make_wheel(index, "older", "0.1", requires=('shared==1.0; python_version < "3.12"',))
    repo = repo_with(
        make_repo,
        {
            "new_only": 'shared==2.0; python_version >= "3.12"\n',
            "old_only": 'shared==1.0; python_version < "3.12"\n',
            "gated": "gated==0.1\n",
            "older": "older==0.1\n",
        },
    )
    on_312 = environments.resolve(repo, python("3.12"), "2.35")
    assert on_312.by_model["new_only"].packages == {"shared": "2.0"}
    assert on_312.by_model["old_only"].packages == {}
    assert on_312.by_model["gated"].packages == {"gated": "0.1", "shared": "2.0"}  # a dependency's marker too
    assert on_312.by_model["older"].packages == {"older": "0.1"}
    on_310 = environments.resolve(repo, python("3.10"), "2.35")
    assert on_310.by_model["new_only"].packages == {} and on_310.by_model["old_only"].packages == {"shared": "1.0"}
    assert on_310.by_model["gated"].packages == {"gated": "0.1"}
    assert on_310.by_model["older"].packages == {"older": "0.1", "shared": "1.0"}


def test_markers_see_the_images_platform_and_full_version(make_repo, index):
    repo = repo_with(make_repo, {"a": 'shared==1.0; python_full_version < "3.9" and sys_platform == "linux"\n'})
    assert environments.resolve(repo, python("3.8"), "2.35").by_model["a"].packages == {"shared": "1.0"}
    from triton_release.image.requirements import marker_environment

    values = marker_environment("3.8")
    assert (
        values["python_version"],
        values["python_full_version"],
        values["sys_platform"],
        values["platform_machine"],
        values["implementation_name"],
    ) == ("3.8", "3.8.0", "linux", "x86_64", "cpython")


# -- console scripts ------------------------------------------------------------------------------

CLI_MODULE = "import shared, sys\n\ndef run():\n    print(sys.argv[0], shared.__version__)\n    return 0\n"


def test_console_scripts_are_written_to_the_environments_bin_as_pip_would(make_repo, index, tmp_path):
    entry_points = (
        "[console_scripts]\nshared-version = shared_cli.main:run\n../escape = shared_cli.main:run\n"
        "python3 = shared_cli.main:run\n[gui_scripts]\nshared-gui = shared_cli.main:Gui.start\n"
    )
    make_wheel(
        index,
        "shared-cli",
        "1.0",
        {
            "shared_cli/__init__.py": "",
            "shared_cli/main.py": CLI_MODULE,
            "shared_cli-1.0.dist-info/entry_points.txt": entry_points,
        },
        requires=("shared",),
    )
    repo = repo_with(make_repo, {"a": "shared-cli==1.0\nshared==1.0\n"})
    env = environments.resolve(repo, INSTALL, "2.35").by_model["a"]
    files = env.files()
    bin_ = "opt/triton-release/envs/a/bin"
    assert sorted(n.rsplit("/", 1)[1] for n in files if n.startswith(bin_)) == [
        "activate",
        "python",
        "python3",
        "python3.11",
        "shared-gui",
        "shared-version",
    ]  # no ../escape; ours stay
    script = files[f"{bin_}/shared-version"]
    assert isinstance(script, layers.Executable)
    assert script.startswith(b"#!/opt/triton-release/envs/a/bin/python\n")
    assert b"from shared_cli.main import run\n" in script and b"sys.exit(run())" in script
    gui = files[f"{bin_}/shared-gui"]
    assert b"from shared_cli.main import Gui\n" in gui and b"sys.exit(Gui.start())" in gui
    local = tmp_path / "shared-version"  # it runs as the image's python runs it
    local.write_bytes(script)
    paths = ":".join(str(d.folder) for d in env.distributions)
    done = subprocess.run([sys.executable, str(local)], capture_output=True, text=True, env={"PYTHONPATH": paths})
    assert done.returncode == 0 and done.stdout.split() == [str(local), "1.0"], done.stderr


def test_a_long_environment_path_gets_pips_sh_launcher():
    long = "/opt/triton-release/envs/" + "m" * 120 + "/bin/python"
    script = environments._script(long, ("pkg.cli", "main"))
    assert script.startswith(b"#!/bin/sh\n'''exec' \"" + long.encode() + b'" "$0" "$@"\n\' \'\'\'\n')
    compile(script, "script", "exec")  # still Python, for the interpreter it starts


# -- a conflict names every line taking part ------------------------------------------------------


def test_conflicting_pins_name_both_lines(make_repo, index):
    make_wheel(index, "needy", "0.1", requires=("shared>=2",))
    repo = repo_with(make_repo, {"a": "# tools\nneedy==0.1\n\nshared==1.0\n"})
    with pytest.raises(Refused) as refused:
        environments.resolve(repo, INSTALL, "2.35")
    message = str(refused.value)
    assert "needy==0.1 (" in message and "a/requirements.txt:2)" in message
    assert "shared==1.0 (" in message and "a/requirements.txt:4)" in message


def test_a_pin_conflicting_with_a_constraint_names_both_files_and_lines(make_repo, index, monkeypatch, tmp_path):
    constraints = tmp_path / "constraints.txt"
    constraints.write_text("# the platform's pins\nshared==2.0\n")
    monkeypatch.setenv("PIP_CONSTRAINT", str(constraints))
    repo = repo_with(make_repo, {"a": "shared==1.0\n"})
    with pytest.raises(Refused) as refused:
        environments.resolve(repo, INSTALL, "2.35")
    message = str(refused.value)
    assert "shared==1.0 (" in message and "a/requirements.txt:1)" in message
    assert f"the constraint shared==2.0 ({constraints}:2)" in message and "or the constraint" in message
