"""The release image's layers and its build context: deterministic per-model tars.

Each model version folder, and each model's other files (config.pbtxt, requirements.txt),
becomes one `ADD <layer>.tar /` whose tar has sorted entries, its parent folders included,
and every mtime, uid, gid and mode fixed. The same files give the same layer digest in every
build, on any machine, whichever other model changed.

Symbolic links that stay inside the model repository are followed: the layer holds what they
point to under the link's name. A link leaving the repository, pointing to nothing or looping is
refused, whether or not `validate` ran first.
"""

from __future__ import annotations

import hashlib
import io
import os
import tarfile
import tempfile
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from stat import S_ISREG

from triton_release.errors import Refused
from triton_release.image.base import STUB_PATH
from triton_release.models.repository import (GOLDEN_DIR, Model, Repository, kind_problem, link_problem,
                                               model_name_problem, walk)
from triton_release.problems import Problem

MODELS_DIR = PurePosixPath("models")
EPOCH = 0  # every entry's mtime
SKIP_NAMES = {"__pycache__", ".git", ".DS_Store", GOLDEN_DIR}
SERVER_COMMAND = ["tritonserver", "--model-repository=/models"]


@dataclass(frozen=True)
class Layer:
    name: str                 # file name in the build context, e.g. add_sub.v1.tar
    model: str
    version: int | None       # None: the model's other files
    files: tuple[Path, ...] = field(repr=False)
    digest: str = ""          # sha256 of the tar we made (stable across builds)

    def to_json(self) -> dict:
        return {"name": self.name, "model": self.model, "version": self.version, "tar_sha256": self.digest}


def _info(name: str, is_dir: bool, size: int = 0, executable: bool = False) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = tarfile.DIRTYPE if is_dir else tarfile.REGTYPE
    info.mode = 0o755 if is_dir or executable else 0o644
    info.size = size
    info.mtime = EPOCH
    info.uid = info.gid = 0
    info.uname = info.gname = "root"
    return info


def _walk(folder: Path) -> list[Path]:
    """Files and folders under `folder` in a stable order, minus caches and golden cases."""
    found = []
    for dirpath, dirnames, filenames in os.walk(folder):
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP_NAMES)
        base = Path(dirpath)
        found.extend(base / d for d in dirnames)
        found.extend(base / f for f in sorted(filenames) if f not in SKIP_NAMES and not f.endswith(".pyc"))
    return sorted(found)


def write_layer_tar(out, entries: dict[str, Path]) -> str:
    """Write one deterministic tar of `entries` (archive name -> file or folder), every parent
    folder included; returns its sha256."""
    digest = hashlib.sha256()

    class Hashing:
        def write(self, data: bytes) -> int:
            digest.update(data)
            return out.write(data)

    names = dict(entries)
    for arcname in entries:
        for parent in PurePosixPath(arcname).parents:
            if str(parent) not in (".", "/"):
                names.setdefault(str(parent), None)
    with tarfile.open(fileobj=Hashing(), mode="w|", format=tarfile.GNU_FORMAT) as tar:
        for arcname in sorted(names):
            path = names[arcname]
            if path is None or path.is_dir():
                tar.addfile(_info(arcname, True))
            else:
                stat = path.stat()
                if not S_ISREG(stat.st_mode):  # a FIFO would block the build, a device never end
                    raise Refused(f"{path}: neither a file nor a folder; remove it from the model repository.")
                with open(path, "rb") as handle:
                    tar.addfile(_info(arcname, False, stat.st_size, bool(stat.st_mode & 0o111)), handle)
    return digest.hexdigest()


def model_entries(model: Model, paths: list[Path]) -> dict[str, Path]:
    return {str(MODELS_DIR / model.name / p.relative_to(model.path).as_posix()): p for p in paths}


def _skipped(name: str) -> bool:
    return name in SKIP_NAMES or name.endswith(".pyc")


def _refuse(problem: Problem) -> Refused:
    return Refused(f"{problem}. Nothing was built; run `triton-release validate` to see every problem.")


def _model_tree(folder: Path, root: Path) -> list[Path]:
    """`folder` and everything below it (or the file `folder`), links inside `root` followed;
    refused at a bad link."""
    problem = link_problem(folder, root) or kind_problem(folder)
    if problem:
        raise _refuse(problem)
    if not folder.is_dir():
        return [folder]
    paths, problems = walk(folder, root, _skipped)
    if problems:
        raise _refuse(problems[0])
    return [folder, *paths]


def plan_layers(model: Model, root: Path | None = None) -> list[tuple[str, int | None, list[Path]]]:
    """(layer file name, version, paths) for the model's other files, then each version.
    `root`: the model repository (default: the model folder's parent)."""
    root = model.path.parent if root is None else Path(root)
    name_problem = model_name_problem(model.name)
    problem = Problem(model.path, name_problem) if name_problem else link_problem(model.path, root)
    if problem:
        raise _refuse(problem)
    versions = {str(v) for v in model.versions}
    others = [p for p in sorted(model.path.iterdir())
              if p.name not in SKIP_NAMES and p.name not in versions and not p.name.startswith(".")]
    other_paths: list[Path] = [model.path]
    for path in others:
        other_paths.extend(_model_tree(path, root))
    plan = [(f"{model.name}.files.tar", None, other_paths)]
    for version in model.versions:
        folder = model.path / str(version)
        plan.append((f"{model.name}.v{version}.tar", version, _model_tree(folder, root)))
    return plan


@dataclass(frozen=True)
class Runtime:
    """What the image gets besides the models: a replacement stub, the models' requirements."""
    stub_file: Path | None = None
    builder_stage: str = ""           # a Dockerfile stage named stub-builder that compiles the stub
    site_packages: str = ""           # where the requirements tree goes
    requirements_tree: Path | None = None

    def layers(self) -> list[tuple[str, dict[str, Path]]]:
        found = []
        if self.stub_file is not None:
            found.append(("stub.tar", {STUB_PATH.lstrip("/"): self.stub_file}))
        if self.requirements_tree is not None:
            site = self.site_packages.strip("/")
            found.append(("requirements.tar", {f"{site}/{p.relative_to(self.requirements_tree).as_posix()}": p
                                               for p in _walk(self.requirements_tree) if p.name != ".complete"}))
        return found


ORDER_LABEL = "triton-release.layers"


def order_layers(layers: list[Layer], previous: list[list[str]]) -> list[Layer]:
    """Unchanged layers first, in the previous build's order, then the changed and new ones.

    The builder's cache holds for every step up to the first changed one, so a one-model change
    re-runs one ADD instead of every ADD after it. Layer digests do not depend on the order.
    """
    current = {(layer.name, layer.digest): layer for layer in layers}
    kept = [current.pop((name, digest)) for name, digest in previous if (name, digest) in current]
    return kept + sorted(current.values(), key=lambda layer: layer.name)


def dockerfile(base_image: str, layers: list[Layer], runtime: Runtime = Runtime()) -> str:
    lines = [runtime.builder_stage.rstrip("\n")] if runtime.builder_stage else []
    lines.append(f"FROM {base_image}")
    if runtime.builder_stage:
        lines.append(f"COPY --from=stub-builder /build/triton_python_backend_stub {STUB_PATH}")
    lines += [f"ADD {layer.name} /" for layer in layers]
    lines.append("CMD " + "[" + ", ".join(f'"{arg}"' for arg in SERVER_COMMAND) + "]")
    return "\n".join(lines) + "\n"


def write_context(out, repo: Repository, base_image: str, models: list[str] | None = None,
                  runtime: Runtime = Runtime(), previous: list[list[str]] = ()) -> list[Layer]:
    """The build context as one tar stream: the Dockerfile and one tar per layer."""
    layers: list[Layer] = []
    with tarfile.open(fileobj=out, mode="w") as context, tempfile.TemporaryDirectory() as tmp:
        def add(name: str, model: str, version: int | None, entries: dict[str, Path]) -> None:
            path = Path(tmp) / name
            with open(path, "wb") as handle:
                digest = write_layer_tar(handle, entries)
            context.add(path, arcname=name)
            path.unlink()
            layers.append(Layer(name, model, version, tuple(entries.values()), digest))

        for name, entries in runtime.layers():
            add(name, "", None, entries)
        for model in repo:
            if models is not None and model.name not in models:
                continue
            for name, version, paths in plan_layers(model, repo.root):
                add(name, model.name, version, model_entries(model, paths))
        layers = order_layers(layers, list(previous))
        text = dockerfile(base_image, layers, runtime).encode()
        info = tarfile.TarInfo("Dockerfile")
        info.size = len(text)
        context.addfile(info, io.BytesIO(text))
    return layers
