"""The cache folder is a hint, never the truth: actions/cache may restore it from another branch or
fork. An unpacked wheel is checked against the wheel it claims to be before it enters a layer, and
a memo of the wrong shape is discarded with a warning, never a crash."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import zipfile
from pathlib import Path

import pytest

from support.models import python_model_files
from support.wheels import make_wheel, offline_index
from triton_release import cache
from triton_release.cli.main import main
from triton_release.errors import Refused
from triton_release.image import environments
from triton_release.image.base import PythonInstall
from triton_release.image.layers import LayerTars
from triton_release.image.plan import Item, plan
from triton_release.models import validate as validate_module
from triton_release.models.repository import Repository

INSTALL = PythonInstall("3.11", "/usr/bin/python3.11", "libpython3.11.so.1.0", "", "/usr/lib/python3/dist-packages", "")
GENUINE = "__version__ = '1.0'\n"


@pytest.fixture
def run(tmp_path, monkeypatch):
    """`run()` starts a new run of the tool on one cache folder (what `main` does first)."""
    monkeypatch.setattr(cache, "_root", None)  # restored afterwards
    folder = tmp_path / "cache"

    def start() -> Path:
        return cache.configure({"TRITON_RELEASE_CACHE": str(folder)})

    start()
    return start


@pytest.fixture
def index(tmp_path, monkeypatch):
    folder = tmp_path / "index"
    make_wheel(folder, "shared", "1.0")
    offline_index(monkeypatch, folder)
    return folder


def shipped(repo: Repository, envs: environments.Environments) -> dict[str, bytes]:
    """The distributions' files as their layers would hold them: archive name -> bytes."""
    items, _ = environments.environment_items(envs, repo)
    return {
        name: path.read_bytes() for item in items if item.key.startswith("dist/") for name, path in item.entries.items()
    }


def poison_rename(folder: Path) -> None:
    (folder / "shared" / "__init__.py").rename(folder / "shared" / "__init__.py.orig")
    (folder / "shared" / "__init__.py").write_text(GENUINE.replace("1.0", "6.6"))


def forge_record(folder: Path) -> None:
    """The edit and the folder's own RECORD made to agree: the RECORD that counts is the wheel's."""
    import base64

    evil = "import os\n__version__ = '1.0'\n"
    (folder / "shared" / "__init__.py").write_text(evil)
    record = folder / "shared-1.0.dist-info" / "RECORD"
    digest = base64.urlsafe_b64encode(hashlib.sha256(evil.encode()).digest()).rstrip(b"=").decode()
    lines = [
        f"shared/__init__.py,sha256={digest},{len(evil)}" if line.startswith("shared/__init__.py,") else line
        for line in record.read_text().splitlines()
    ]
    record.write_text("\n".join(lines) + "\n")


POISONS = {
    "an edited file": lambda folder: (folder / "shared" / "__init__.py").write_text("__version__ = '6.6'\n"),
    "an edit of the same size": lambda folder: (folder / "shared" / "__init__.py").write_text(
        GENUINE.replace("1.0", "6.6")
    ),
    "an edit agreeing with the folder's RECORD": forge_record,
    "an added file": lambda folder: (folder / "sitecustomize.py").write_text("import os\n"),
    "a removed file": lambda folder: (folder / "shared" / "__init__.py").unlink(),
    "a file made executable": lambda folder: (folder / "shared" / "__init__.py").chmod(0o755),
    "a file swapped for a link": lambda folder: (
        (folder / "shared" / "__init__.py").unlink(),
        (folder / "shared" / "__init__.py").symlink_to("/etc/hostname"),
    ),
    "a renamed file and a new one": poison_rename,
}


@pytest.mark.parametrize("poison", POISONS.values(), ids=POISONS.keys())
def test_a_poisoned_unpacked_wheel_is_discarded_with_a_warning_and_made_again(make_repo, index, run, poison, caplog):
    repo = Repository.load(
        make_repo({**python_model_files("a"), "a/requirements.txt": "shared==1.0\n", **python_model_files("b")})
    )
    before = environments.resolve(repo, INSTALL, "2.35")
    genuine = shipped(repo, before)
    (dist,) = before.distributions
    poison(dist.folder)

    run()  # the next run, on the cache as it was restored
    with caplog.at_level(logging.WARNING, logger="triton_release"):
        after = environments.resolve(repo, INSTALL, "2.35")
    assert after.fingerprints() == before.fingerprints()  # the same wheel: the model's tests still stand ...
    assert shipped(repo, after) == genuine  # ... because the layer gets the wheel's own bytes
    assert (dist.folder / "shared" / "__init__.py").read_text() == GENUINE
    warning = "\n".join(record.getMessage() for record in caplog.records)
    assert str(dist.folder) in warning and "discarded" in warning and "shared-1.0-py3-none-any.whl" in warning


def test_an_unpacked_wheel_is_checked_once_per_run_and_each_wheel_hashed_once(make_repo, index, run, monkeypatch):
    models = {k: v for n in range(5) for k, v in python_model_files(f"m{n}").items()}
    requirements = {f"m{n}/requirements.txt": "shared==1.0\n" for n in range(5)}
    repo = Repository.load(make_repo({**models, **requirements}))
    (dist,) = environments.resolve(repo, INSTALL, "2.35").distributions
    opened: list[Path] = []

    def counting(path, *args, **kwargs):
        opened.append(Path(path))
        return open(path, *args, **kwargs)

    monkeypatch.setattr(environments, "open", counting, raising=False)

    def read() -> tuple[int, int]:
        wheels = [p for p in opened if p.suffix == ".whl"]
        unpacked = [p for p in opened if dist.folder in p.parents]
        opened.clear()
        return len(wheels), len(unpacked)

    environments.resolve(repo, INSTALL, "2.35")  # the same run: nothing is read again
    assert read() == (0, 0)
    run()  # a new run: the folder is checked once for the five models that use it
    environments.resolve(repo, INSTALL, "2.35")
    files = [p for p in dist.folder.rglob("*") if p.is_file() and p.name != ".complete"]
    wheels, unpacked = read()
    assert wheels <= 1 and unpacked == len(files)


def test_a_wheel_whose_record_disagrees_with_its_files_is_refused_and_removed(tmp_path, run):
    wheel = make_wheel(tmp_path / "store", "liar", "1.0")
    with zipfile.ZipFile(wheel) as archive:
        members = {info.filename: archive.read(info) for info in archive.infolist()}
    members["liar/__init__.py"] = b"__version__ = 'other'\n"
    with zipfile.ZipFile(wheel, "w") as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    with pytest.raises(Refused, match="does not match its own RECORD") as refused:
        environments.unpack(wheel)
    assert "liar/__init__.py" in str(refused.value) and not wheel.exists()
    assert not list((cache.cache_dir() / "dists").iterdir())


def test_a_cache_entry_that_is_not_a_folder_is_replaced(tmp_path, run, caplog):
    wheel = make_wheel(tmp_path / "store", "plain", "1.0")
    folder = cache.cache_dir() / "dists" / hashlib.sha256(wheel.read_bytes()).hexdigest()
    folder.parent.mkdir(parents=True)
    folder.symlink_to(tmp_path)
    with caplog.at_level(logging.WARNING, logger="triton_release"):
        dist = environments.unpack(wheel)
    assert dist.folder == folder and folder.is_dir() and not folder.is_symlink()
    assert (folder / "plain" / "__init__.py").is_file() and "not a folder" in caplog.text


# -- memos of the wrong shape: discarded with a warning ---------------------------------------


def test_a_verdict_memo_of_the_wrong_shape_is_discarded_with_a_warning_not_a_crash(
    make_repo, tmp_path, monkeypatch, capsys
):
    monkeypatch.setattr(cache, "_root", None)
    monkeypatch.setattr(validate_module, "_VERDICTS", None)
    root = make_repo(python_model_files("a"))
    env = {"TRITON_RELEASE_CACHE": str(tmp_path / "cache"), "HOME": str(tmp_path)}
    assert main(["validate", "--model-repository", str(root)], env=env) == 0
    validate_module.verdicts().save()
    memo = validate_module.verdicts().path
    answers = json.loads(memo.read_text())
    for wrong in (
        {"problems": 5, "warnings": [], "golden_cases": 1},
        [1, 2],
        {"golden_cases": "1"},
        {"problems": [[None, ["a", "m", "seven", None]]], "warnings": [], "golden_cases": 1},
        {"problems": [], "warnings": [[1, 2]], "golden_cases": 1},
    ):
        memo.write_text(json.dumps({key: wrong for key in answers}))
        monkeypatch.setattr(validate_module, "_VERDICTS", None)
        assert main(["validate", "--model-repository", str(root)], env=env) == 0, wrong
        assert "wrong shape" in "".join(capsys.readouterr())
    memo.write_text("[1, 2, 3]")
    monkeypatch.setattr(validate_module, "_VERDICTS", None)
    assert main(["validate", "--model-repository", str(root)], env=env) == 0
    assert "is not a JSON object" in "".join(capsys.readouterr())


def test_a_memo_answer_the_caller_cannot_read_is_discarded_once_and_worked_out_again(run, caplog):
    memo = cache.Memo("t", "1")
    memo.put("a", {"x": 1})
    memo.put("b", "text")
    with caplog.at_level(logging.WARNING, logger="triton_release"):
        assert memo.get("a", lambda answer: answer["x"]) == 1
        assert memo.get("b", lambda answer: answer["x"]) is None  # a str has no ["x"]: discarded
        assert memo.get("b") is None
    assert "wrong shape" in caplog.text
    memo.path.parent.mkdir(parents=True, exist_ok=True)
    memo.path.write_bytes(b"\xff\xfe not json")
    with caplog.at_level(logging.WARNING, logger="triton_release"):
        assert cache.Memo("t", "1").get("a") is None
    assert "cannot be read as JSON" in caplog.text


@pytest.mark.parametrize("wrong", [b"not a digest", b"\xff\xfe\x00", b"", b"A" * 64, "folder"])
def test_a_remembered_layer_digest_of_the_wrong_shape_is_discarded_and_the_layer_written(tmp_path, run, wrong, caplog):
    known = tmp_path / "known"
    known.mkdir()
    item = Item("dist/big-1.0-0123456789ab", {"opt/big/x.py": b"x"}, 1, fingerprint="wheel-sha256:01")
    planned = plan([item], 100)[0]
    good = LayerTars(tmp_path, known).layer(planned).digest
    (remembered,) = known.iterdir()
    remembered.unlink()
    if wrong == "folder":
        (remembered / "inside").mkdir(parents=True)
    else:
        remembered.write_bytes(wrong)
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    with caplog.at_level(logging.WARNING, logger="triton_release"):
        layer = LayerTars(fresh, known).layer(planned)
    assert layer.digest == good and (fresh / f"{good}.tar").is_file()  # written again
    assert remembered.read_text() == good and "not a layer digest" in caplog.text


RESOLUTIONS = {
    "not JSON": b"{",
    "an object": b'{"shared-1.0-py3-none-any.whl": 1}',
    "a path out of the store": json.dumps(["../../index/shared-1.0-py3-none-any.whl"]).encode(),
    "a wheel not pinned": json.dumps(["other-1.0-py3-none-any.whl"]).encode(),
    "a pin left out": b"[]",
    "not UTF-8": b"\xff\xfe",
    "numbers": b"[1, 2]",
}


@pytest.mark.parametrize("wrong", RESOLUTIONS.values(), ids=RESOLUTIONS.keys())
def test_a_kept_resolution_of_the_wrong_shape_is_discarded_and_resolved_again(
    make_repo, index, run, wrong, caplog, tmp_path
):
    make_wheel(tmp_path / "store-only", "other", "1.0")
    repo = Repository.load(make_repo({**python_model_files("a"), "a/requirements.txt": "shared==1.0\n"}))
    first = environments.resolve(repo, INSTALL, "2.35")
    (kept,) = (cache.cache_dir() / "resolutions").iterdir()
    kept.write_bytes(wrong)
    os.link(
        tmp_path / "store-only" / "other-1.0-py3-none-any.whl",
        cache.cache_dir() / "wheels" / "other-1.0-py3-none-any.whl",
    )
    with caplog.at_level(logging.WARNING, logger="triton_release"):
        again = environments.resolve(repo, INSTALL, "2.35")
    assert again.by_model["a"].packages == first.by_model["a"].packages == {"shared": "1.0"}
    assert "is not a resolution" in caplog.text
    assert json.loads(kept.read_text()) == ["shared-1.0-py3-none-any.whl"]  # pip's answer, kept anew


@pytest.mark.parametrize("answer", ["not base64 at all!", "AAAA", 17, ["x"]])
def test_a_config_memo_of_the_wrong_shape_is_parsed_again(tmp_path, answer):
    from triton_release.models.repository import PARSED, parse_config

    text = 'name: "a"\nbackend: "python"\nmax_batch_size: 4\n'
    PARSED.put(text, answer)
    config, problems = parse_config(tmp_path / "config.pbtxt", text)
    assert problems == [] and config.name == "a" and config.max_batch_size == 4
