"""The layer plan: the image's items packed into at most the slots the layer budget leaves.

The slots are `max_layers` minus the base image's own layers, minus MARGIN. When every item fits, each gets its own layer, and a change uploads
exactly the changed items. Otherwise items smaller than GROUP_BYTES share group layers, as few
as hold about GROUP_BYTES each (a power of two, at most half the slots), and the largest of the
others keep a layer each in the remaining slots (sizes within a factor of two rank alike, then by
key, so a small edit seldom moves an item); every grouped item goes to the group its key hashes to
(its key, not its content: it stays in that group whatever it holds, and a new version folder
lands in a group known in advance). A change then uploads each changed item's own layer or its
group, and, when it moves an item across the own/grouped boundary (a new large version folder
among the largest, one removed), the group of the one item it displaces (and that item's own
layer, when it is promoted). Few layers matter as much as small ones: every layer after the first
changed one is sent to the daemon again (its chain changed), though the registry gets only the
changed ones.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from triton_release.errors import Refused
from triton_release.models.repository import VERSION_DIR, model_name_problem

# Two layers below the budget stay free: room for a layer or two that a Dockerfile FROM the
# release image adds, and for one more that a later version of this plan may need.
MARGIN = 2
# Fewer slots than this would put most of a repository in a handful of layers: refused.
MIN_SLOTS = 8
# Items smaller than this share group layers once the items outnumber the slots, about this much
# per group: every layer is one more tar to write and load (and an overlay2 level), and a small
# item's change re-sends its group, a few hundred KiB at most.
GROUP_BYTES = 256 * 1024


@dataclass(frozen=True)
class Item:
    """A piece of the image with a stable identity: its own layer, or one of a group layer."""

    key: str  # e.g. "model/add_sub", "model/add_sub/2", "stub", "env/add_sub"
    entries: Mapping[str, Path | bytes] = field(repr=False)  # archive name -> file or folder, or a file's content
    size: int  # bytes of file content
    fingerprint: str = ""  # when set: names the entries' bytes exactly (a content-addressed
    # distribution), so its layer's digest can be remembered


_CLEAN_PART = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.+-]*")
_TAKEN = re.compile(r"^group-\d+$|\.files$|\.v\d+$")  # the shapes of group and model layer names


def layer_name(key: str) -> str:
    """The file name of a layer holding only `key`: unique per key, the same on every machine.
    "model/m" -> m.files.tar, "model/m/2" -> m.v2.tar, "dist/x-1.0" -> dist--x-1.0.tar; a key
    that would not read back unambiguously gets a short hash of itself instead."""
    parts = key.split("/")
    if parts[0] == "model" and len(parts) in (2, 3) and model_name_problem(parts[1]) is None:
        if len(parts) == 2:
            return f"{parts[1]}.files.tar"
        if VERSION_DIR.match(parts[2]):
            return f"{parts[1]}.v{parts[2]}.tar"
    slug = "--".join(parts)
    if (
        all(_CLEAN_PART.fullmatch(p) and "--" not in p and not p.endswith("-") for p in parts)
        and not _TAKEN.search(slug)
        and len(slug) <= 200
    ):
        return f"{slug}.tar"
    safe = re.sub(r"[^A-Za-z0-9_.+-]", "_", slug)[:100]
    if not safe[:1].isalnum():
        safe = "item" + safe
    return f"{safe}~{hashlib.sha256(key.encode()).hexdigest()[:12]}.tar"


def size_class(size: int) -> int:
    """Sizes within a factor of two of each other rank alike (then by key): an edit of a few
    bytes seldom moves an item between its own layer and a group."""
    return size.bit_length()


def group_count(slots: int, grouped_bytes: int = 1 << 62) -> int:
    """Group layers when the items outnumber the slots: enough for about GROUP_BYTES each (a power
    of two, so a growing repository repacks its groups only when it doubles), at most half the
    slots; the other slots hold the largest items."""
    wanted = max(1, -(-grouped_bytes // GROUP_BYTES))
    return max(1, min(slots // 2, 1 << (wanted - 1).bit_length()))


def group_of(key: str, groups: int) -> int:
    return int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "big") % groups


@dataclass(frozen=True)
class Planned:
    name: str
    items: tuple[Item, ...]  # sorted by key
    grouped: bool = False


def plan(items: Iterable[Item], slots: int) -> list[Planned]:
    """The layers for `items` in at most `slots` layers, sorted by name: one per item when they
    fit; else the largest items one each and the others in group layers by their key's hash."""
    if slots < 1:
        raise ValueError(f"no slot for the layers ({slots})")
    ordered = sorted(items, key=lambda item: item.key)
    keys = [item.key for item in ordered]
    if len(set(keys)) != len(keys):
        raise ValueError(f"items with the same key: {sorted({k for k in keys if keys.count(k) > 1})}")
    if len(ordered) <= slots:
        found = [Planned(layer_name(item.key), (item,)) for item in ordered]
    else:
        large = [item for item in ordered if item.size >= GROUP_BYTES]
        largest = sorted(large, key=lambda item: (-size_class(item.size), item.key))
        groups = group_count(
            slots, sum(item.size for item in ordered) - sum(item.size for item in largest[: slots // 2])
        )
        own = {item.key for item in largest[: slots - groups]}
        members: dict[int, list[Item]] = {}
        for item in ordered:
            if item.key not in own:
                members.setdefault(group_of(item.key, groups), []).append(item)
        width = max(2, len(str(groups - 1)))
        found = [Planned(layer_name(item.key), (item,)) for item in ordered if item.key in own]
        found += [Planned(f"group-{index:0{width}d}.tar", tuple(held), True) for index, held in sorted(members.items())]
    names = [layer.name for layer in found]
    if len(set(names)) != len(names):
        raise ValueError(f"two layers named alike: {sorted({n for n in names if names.count(n) > 1})}")
    return sorted(found, key=lambda layer: layer.name)


def layer_slots(max_layers: int, base_layers: int, base_image: str = "") -> int:
    """The layers left for the items; refused when fewer than MIN_SLOTS remain."""
    slots = max_layers - base_layers - MARGIN
    if slots >= MIN_SLOTS:
        return slots
    base = f"The base image {base_image}" if base_image else "The base image"
    left = "no layer is left" if slots <= 0 else f"only {slots} are left"
    raise Refused(f"""
        {base} has {base_layers} layers: with max_layers {max_layers} and {MARGIN} kept free,
        {left} for the models, and the layer plan needs at least {MIN_SLOTS}.
        Nothing was built. Raise max_layers in triton-release.yaml (or --max-layers; overlay2
        refuses images deeper than about 125 layers), or flatten the base image into fewer
        layers (`docker export` of a container of it, then `docker import`).""")


def check_disjoint(items: list[Item]) -> None:
    """No two items may hold a file at one name with different contents: which one the image
    shows would depend on the layers' order."""
    owner: dict[str, tuple[str, Path | bytes]] = {}
    for item in items:
        for name, value in item.entries.items():
            key, seen = owner.setdefault(name.strip("/"), (item.key, value))
            if (
                key != item.key
                and seen != value
                and not (isinstance(seen, Path) and isinstance(value, Path) and seen.is_dir() and value.is_dir())
            ):
                raise ValueError(f"{name} is in both {key} and {item.key}")
