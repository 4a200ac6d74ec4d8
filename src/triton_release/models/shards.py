"""The shard plan: which tested models go to which runner, and the names every stage shares.

A tested model goes with what it needs loaded (an ensemble's steps, the models a Python model
calls: `Repository.needs`), and a tested model that another tested model needs goes with that
one, so no model is tested twice and the models of a group share a server. These groups are
packed into shards, heaviest first, each into the lightest shard (greedy largest-first), so that
the shards take about as long as each other. A group's weight:

    for each model it tests:  golden cases + 1
    for each model it loads:  size of its newest version folder in MiB / 10

(a case costs one request; a model costs a load and a ready check, which take longer the larger
its files: 10 MiB count as one case). The same repository and names always make
the same plan, named shard-1, shard-2, ... in the order of their first model.

The plan travels as the candidate image's label (`SHARDS_LABEL`), so `promote` knows which
records it needs, and how many golden cases of each model each must have run, without anything
else; and as the `shards` output: a JSON list that a workflow's `strategy.matrix.include` takes as
it is.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from triton_release.contract import CHANGED_LABEL, SHARDS_LABEL, is_planned_shard_name
from triton_release.errors import Refused, UsageError
from triton_release.models.devices import needs_gpu
from triton_release.models.graph import needed
from triton_release.models.repository import Repository

DEFAULT_MODELS_PER_SHARD = 25  # without --shards or --max-models-per-shard: one shard per 25 models ...
DEFAULT_MAX_SHARDS = 8  # ... and at most this many
MAX_SHARDS = 256  # a GitHub Actions matrix runs at most 256 jobs


@dataclass(frozen=True)
class Shard:
    name: str
    models: tuple[str, ...]  # the models whose golden cases this shard runs
    load: tuple[str, ...]  # the models its server loads: those and what they need
    cases: int  # golden case files of its models
    gpu: bool  # a model it loads has a KIND_GPU instance group
    model_cases: tuple[int, ...] | None = None  # each model's golden case files (None: a plan from before)

    def to_json(self) -> dict:
        data = {
            "name": self.name,
            "models": list(self.models),
            "load": list(self.load),
            "cases": self.cases,
            "gpu": self.gpu,
        }
        if self.model_cases is not None:
            data["model_cases"] = dict(zip(self.models, self.model_cases))
        return data

    def case_counts(self) -> dict[str, int] | None:
        """Each tested model -> the golden cases the shard must run of it; None for a plan made
        before the plan said (then only `cases`, their sum, is known)."""
        return dict(zip(self.models, self.model_cases)) if self.model_cases is not None else None

    def matrix_entry(self) -> dict:
        """One `strategy.matrix.include` entry: lists as the comma-separated text `--models` takes."""
        return {
            "name": self.name,
            "models": ",".join(self.models),
            "load": ",".join(self.load),
            "cases": self.cases,
            "gpu": self.gpu,
        }


def check_shard_name(name: str) -> str:
    """Shard names become part of a registry tag: only the names a plan makes."""
    if not is_planned_shard_name(name or ""):
        raise UsageError(
            f"{name!r} is not a shard name; shards are named shard-1, shard-2, ... (the stage's `shards` output)."
        )
    return name


def folder_mib(folder: Path) -> float:
    """The size of the files under `folder` in MiB (symbolic links not followed)."""
    if not folder.is_dir():
        return 0.0
    return sum(p.lstat().st_size for p in folder.rglob("*") if p.is_file() and not p.is_symlink()) / (1 << 20)


def check_counts(shards: int | None, max_models: int | None) -> None:
    """--shards and --max-models-per-shard, checked before anything runs."""
    if shards is not None and max_models is not None:
        raise UsageError("give --shards or --max-models-per-shard, not both.")
    if shards is not None and not 1 <= shards <= MAX_SHARDS:
        raise UsageError(
            f"--shards {shards}: give 1 to {MAX_SHARDS} (a workflow's matrix runs at most {MAX_SHARDS} jobs)."
        )
    if max_models is not None and max_models < 1:
        raise UsageError(f"--max-models-per-shard {max_models}: give 1 or more.")


def plan_shards(
    repo: Repository, names: Iterable[str], *, shards: int | None = None, max_models: int | None = None
) -> list[Shard]:
    """The shards that test `names`: `shards` of them, or as many as hold at most `max_models`
    tested models each (a group bigger than that is a shard of its own), or by default one per
    25 models, at most 8. Never more shards than groups; none for no names."""
    check_counts(shards, max_models)
    tested = sorted(set(names))
    repo.require(tested)
    if not tested:
        return []
    groups = _groups(repo, tested)
    sizes = {
        name: folder_mib(repo[name].path / str(repo[name].newest_version)) if name in repo else 0.0
        for name in set().union(*(load for _, load in groups))
    }
    cases = {name: len(repo[name].golden_cases) for name in tested}

    def weight(group: tuple[list[str], frozenset[str]]) -> float:
        members, load = group
        return sum(cases[m] + 1 for m in members) + sum(sizes[m] for m in load) / 10

    capacity = max_models
    if shards is not None:
        count = shards
    elif max_models is not None:
        count = math.ceil(len(tested) / max_models)
    else:
        count = min(DEFAULT_MAX_SHARDS, math.ceil(len(tested) / DEFAULT_MODELS_PER_SHARD))
    bins: list[tuple[list[str], set[str], list[float]]] = [([], set(), [0.0]) for _ in range(count)]
    for group in sorted(groups, key=lambda g: (-weight(g), g[0][0])):
        members, load = group
        fits = [b for b in bins if capacity is None or not b[0] or len(b[0]) + len(members) <= capacity]
        if not fits:
            bins.append(([], set(), [0.0]))
            fits = bins[-1:]
        target = min(fits, key=lambda b: b[2][0])  # the first of the lightest
        target[0].extend(members)
        target[1].update(load)
        target[2][0] += weight(group)
    if len(bins) > MAX_SHARDS:
        raise UsageError(
            f"{len(tested)} models at --max-models-per-shard {max_models} make {len(bins)} shards; a "
            f"workflow's matrix runs at most {MAX_SHARDS} jobs. Give a larger --max-models-per-shard."
        )
    filled = sorted((sorted(members), sorted(load)) for members, load, _ in bins if members)
    return [
        Shard(
            f"shard-{i}",
            tuple(members),
            tuple(load),
            sum(cases[m] for m in members),
            any(needs_gpu(repo[m].config) for m in load if m in repo),
            tuple(cases[m] for m in members),
        )
        for i, (members, load) in enumerate(filled, start=1)
    ]


def _groups(repo: Repository, tested: list[str]) -> list[tuple[list[str], frozenset[str]]]:
    """(tested models, models loaded) kept together: each tested model's group (it and what it
    needs), a group inside another tested model's going with the first such, in name order."""
    needs = repo.needs()
    own = {name: frozenset(needed([name], needs)) for name in tested}
    outer = list(dict.fromkeys(g for g in own.values() if not any(g < other for other in own.values())))
    members: dict[frozenset[str], list[str]] = {g: [] for g in outer}
    for name in tested:
        members[next(g for g in outer if own[name] <= g)].append(name)
    return [(members[g], g) for g in outer]


def shards_label(shards: list[Shard]) -> str:
    return json.dumps([s.to_json() for s in shards], separators=(",", ":"))


def shards_from_label(text: str | None) -> list[Shard]:
    """The shard plan a candidate carries; refused when the label is missing or not a plan."""
    try:
        data = json.loads(text or "")
        if not isinstance(data, list):
            raise TypeError(data)
        shards = [_shard(entry) for entry in data]
    except (ValueError, TypeError, KeyError, AttributeError, UsageError):
        raise Refused(f"""
            The candidate's label {SHARDS_LABEL} is {"missing" if not text else "not a shard plan"}: it was not
            staged by `triton-release stage`. Stage the commit again.""") from None
    return shards


def _shard(entry: dict) -> Shard:
    models = tuple(str(m) for m in entry["models"])
    counts = entry.get("model_cases")
    if counts is not None:
        if not isinstance(counts, dict) or set(counts) != set(models):
            raise ValueError("model_cases does not count the shard's models")
        counts = tuple(int(counts[m]) for m in models)
    load = tuple(str(m) for m in entry.get("load", entry["models"]))
    return Shard(
        check_shard_name(str(entry["name"])),
        models,
        load,
        int(entry.get("cases", 0)),
        bool(entry.get("gpu", False)),
        counts,
    )


def build_inputs_label(inputs: dict) -> str:
    return json.dumps(inputs, sort_keys=True, separators=(",", ":"))


def build_inputs_from_label(text: str | None) -> dict | None:
    """What a candidate says it was built from; None when it does not say (staged by an earlier
    triton-release) or the label is not an object."""
    try:
        data = json.loads(text) if text else None
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


def changed_label(names: Iterable[str]) -> str:
    return json.dumps(sorted(set(names)), separators=(",", ":"))


def new_versions_from_label(text: str | None) -> tuple[str, ...] | None:
    """The models with a new version (compared with their previous one: drift); None when the
    candidate has no such label (staged by an earlier triton-release) or it is not a list."""
    try:
        data = json.loads(text) if text is not None else None
    except ValueError:
        return None
    return tuple(m for m in data if isinstance(m, str)) if isinstance(data, list) else None


def unmeasurable_label(why: dict[str, str]) -> str:
    return json.dumps(why, sort_keys=True, separators=(",", ":"))


def unmeasurable_from_label(text: str | None) -> dict[str, str]:
    """Model -> why its drift cannot be measured; a label that is absent or not such an object names
    none (drift is then measured, as before the label existed)."""
    try:
        data = json.loads(text) if text is not None else None
    except ValueError:
        return {}
    if not isinstance(data, dict):
        return {}
    return {m: why for m, why in data.items() if isinstance(m, str) and isinstance(why, str)}


def changed_from_label(text: str | None) -> list[str]:
    try:
        data = json.loads(text or "")
    except ValueError:
        data = None
    if not isinstance(data, list) or not all(isinstance(m, str) for m in data):
        raise Refused(f"""
            The candidate's label {CHANGED_LABEL} is {"missing" if not text else "not a list of models"}: it was
            not staged by `triton-release stage`. Stage the commit again.""")
    return data
