"""Layer tars, the layer plan and the layers' order, without Docker."""

from __future__ import annotations

import hashlib
import io
import os
import random
import tarfile
from pathlib import Path

import pytest

from support.models import python_config, python_model_files, write_tree
from triton_release.errors import Refused
from triton_release.image.layers import (
    Executable,
    Layer,
    LayerTars,
    Runtime,
    StaleDigest,
    entries_fingerprint,
    order_layers,
    plan_image,
    write_layer_tar,
)
from triton_release.image.plan import MIN_SLOTS, Item, group_count, group_of, layer_name, layer_slots, plan
from triton_release.models.repository import Repository

SLOTS = 114  # 120 - the stand-in base's 4 layers - 2 kept free


def layer(name: str, digest: str) -> Layer:
    return Layer(name, (name,), digest)


def test_unchanged_layers_keep_the_previous_order_and_changed_ones_go_last():
    previous = [["b.files.tar", "1"], ["group-03.tar", "2"], ["c.v1.tar", "3"]]
    now = [layer("group-03.tar", "2"), layer("a.v2.tar", "9"), layer("b.files.tar", "1"), layer("c.v1.tar", "4")]
    assert [x.name for x in order_layers(now, previous)] == ["b.files.tar", "group-03.tar", "a.v2.tar", "c.v1.tar"]


def test_the_same_files_give_the_same_tar_whatever_their_times(tmp_path):
    (tmp_path / "m" / "1").mkdir(parents=True)
    model_py = tmp_path / "m" / "1" / "model.py"
    model_py.write_text("x = 1\n")
    entries = {"models/m/1": model_py.parent, "models/m/1/model.py": model_py}
    first = write_layer_tar(io.BytesIO(), entries)
    os.utime(model_py, (1, 1))
    assert write_layer_tar(io.BytesIO(), entries) == first
    model_py.write_text("x = 2\n")
    assert write_layer_tar(io.BytesIO(), entries) != first


def test_bytes_are_a_file_of_that_content_and_as_deterministic(tmp_path):
    out = io.BytesIO()
    digest = write_layer_tar(out, {"models/m/config.pbtxt": b'backend: "python"\n'})
    out.seek(0)
    with tarfile.open(fileobj=out) as tar:
        members = {m.name: m for m in tar.getmembers()}
        assert sorted(members) == ["models", "models/m", "models/m/config.pbtxt"]
        config = members["models/m/config.pbtxt"]
        assert (config.mode, config.mtime, config.uid, config.isfile()) == (0o644, 0, 0, True)
        assert tar.extractfile(config).read() == b'backend: "python"\n'
    on_disk = tmp_path / "config.pbtxt"
    on_disk.write_bytes(b'backend: "python"\n')
    assert write_layer_tar(io.BytesIO(), {"models/m/config.pbtxt": on_disk}) == digest


# -- the plan ---------------------------------------------------------------------------------

ONE = b"x = 1\n" * 100  # 600 bytes, about a model.py


def tiny(key: str, content: bytes = ONE) -> Item:
    return Item(key, {f"files/{key}": content}, len(content))


def tiny_models(count: int) -> list[Item]:
    return [tiny(f"model/m{i:04d}{suffix}") for i in range(count) for suffix in ("", "/1")]


def digests(items: list[Item], slots: int = SLOTS) -> dict[str, str]:
    """Layer name -> the sha256 of its tar."""
    found = {}
    for planned in plan(items, slots):
        entries = {}
        for item in planned.items:
            entries.update(item.entries)
        found[planned.name] = write_layer_tar(io.BytesIO(), entries)
    return found


def group_holding(items: list[Item], key: str) -> str:
    return next(p.name for p in plan(items, SLOTS) if key in {i.key for i in p.items})


def changed(before: dict[str, str], after: dict[str, str]) -> set[str]:
    """The layers after that the registry does not already hold."""
    return {name for name, digest in after.items() if before.get(name) != digest}


def test_one_layer_per_item_when_they_fit():
    items = tiny_models(SLOTS // 2)
    planned = plan(items, SLOTS)
    assert len(planned) == len(items) and all(len(p.items) == 1 and not p.grouped for p in planned)
    assert {p.name for p in planned} >= {"m0000.files.tar", "m0000.v1.tar"}


def test_the_plan_is_the_same_whatever_order_the_items_come_in():
    items = tiny_models(300)
    shuffled = items[:]
    random.Random(7).shuffle(shuffled)
    assert plan(shuffled, SLOTS) == plan(items, SLOTS)
    assert digests(shuffled) == digests(items)


def test_groups_are_placed_by_a_hash_of_the_key_alone():
    assert group_of("model/add_sub/2", 57) == group_of("model/add_sub/2", 57) == 9  # the same on any machine
    assert group_count(SLOTS) == 57


def test_two_thousand_items_fit_in_the_slots_each_in_one_layer():
    items = tiny_models(1000)
    planned = plan(items, SLOTS)
    assert len(planned) <= SLOTS
    held = [item.key for p in planned for item in p.items]
    assert sorted(held) == sorted(item.key for item in items)
    groups = [p for p in planned if p.grouped]
    assert len(groups) == group_count(SLOTS, sum(item.size for item in items)) == 8  # 1.2 MB: about 256 KiB each
    assert all(p.name.startswith("group-") for p in groups) and len(planned) == 8  # tiny: all grouped
    assert max(len(p.items) for p in groups) < 3 * len(items) / len(groups)  # the hash spreads them
    assert group_count(SLOTS) == SLOTS // 2  # many bytes: at most half the slots


def test_a_changed_small_item_changes_exactly_its_group_layer():
    items = tiny_models(200)
    before = digests(items)
    index = next(i for i, item in enumerate(items) if item.key == "model/m0042/1")
    items[index] = tiny("model/m0042/1", b"x = 2\n" * 100)
    after = digests(items)
    assert set(after) == set(before)
    assert changed(before, after) == {
        next(p.name for p in plan(items, SLOTS) if "model/m0042/1" in {i.key for i in p.items})
    }
    assert changed(before, after) <= {name for name in after if name.startswith("group-")}


def test_a_new_small_version_changes_only_the_group_its_key_names():
    items = tiny_models(200)
    before = digests(items)
    after = digests(items + [tiny("model/m0042/2")])
    assert changed(before, after) == {group_holding(items + [tiny("model/m0042/2")], "model/m0042/2")}


def test_a_few_more_bytes_do_not_move_an_item_between_its_own_layer_and_a_group():
    large = [Item(f"model/w{i:03d}/1", {f"files/w{i:03d}": b"w" * 300_000}, 300_000) for i in range(90)]
    items = tiny_models(50) + large  # 90 items of about one large size: the first 57 by key have their own layer
    before = digests(items)
    for key, layer_name_ in (("model/w000/1", "w000.v1.tar"), ("model/w080/1", None)):
        grown = [
            Item(key, {f"files/{key[6:10]}": b"w" * 300_010}, 300_010) if item.key == key else item for item in items
        ]
        assert changed(before, digests(grown)) == {layer_name_ or group_holding(grown, key)}


def test_a_new_large_version_uploads_its_own_layer_and_the_displaced_item_s_group():
    large = [Item(f"model/big{i:02d}/1", {f"files/big{i:02d}": b"w" * 300_000}, 300_000) for i in range(90)]
    items = tiny_models(200) + large
    new = Item("model/big99/1", {"files/big99": b"w" * 1_000_000}, 1_000_000)
    before, after = digests(items), digests(items + [new])
    own_before = {p.items[0].key for p in plan(items, SLOTS) if not p.grouped}
    own_after = {p.items[0].key for p in plan(items + [new], SLOTS) if not p.grouped}
    assert own_after - own_before == {"model/big99/1"} and len(own_before - own_after) == 1
    displaced = (own_before - own_after).pop()  # the last of the largest until then (alike in size, then by key)
    assert changed(before, after) == {"big99.v1.tar", group_holding(items + [new], displaced)}


def test_layer_names_stay_unique_for_model_names_that_look_alike():
    keys = [
        f"model/{name}{version}"
        for name in ("a", "a.v1", "a.files", "a-", "a--b", "a.v1.v2", "group-07")
        for version in ("", "/1", "/2")
    ]
    keys += ["stub", "requirements", "env/a", "env/a--b", "dist/a-1.0-0123456789ab", "group-07", "dist/a.files"]
    names = [layer_name(key) for key in keys]
    assert len(set(names)) == len(names)
    assert all(name.endswith(".tar") and " " not in name and "/" not in name for name in names)
    assert layer_name("model/add_sub/2") == "add_sub.v2.tar" and layer_name("stub") == "stub.tar"


def test_a_group_layer_reports_its_count_and_a_few_keys():
    keys = tuple(f"model/m{i}" for i in range(40))
    shown = Layer("group-03.tar", keys, "abc", 100, True).to_json()
    assert shown == {
        "name": "group-03.tar",
        "item_count": 40,
        "items": list(keys[:5]),
        "tar_sha256": "abc",
        "bytes": 100,
    }


# -- the image's layers -----------------------------------------------------------------------


def written_layers(tmp_path, repo, **kw) -> tuple[list[Layer], dict[str, dict[str, bytes | None]]]:
    """The planned layers, and layer name -> {entry: content (None for folders)} of their tars."""
    folder = tmp_path / "layers"
    folder.mkdir(exist_ok=True)
    tars = LayerTars(folder)
    layers = [tars.layer(planned) for planned in plan_image(repo, "base", **kw)]
    found = {}
    for layer in layers:
        with tarfile.open(tars.tar(layer.digest)) as tar:
            found[layer.name] = {m.name: tar.extractfile(m).read() if m.isfile() else None for m in tar.getmembers()}
    return layers, found


def test_model_files_replace_a_config_and_add_one_where_absent(make_repo, tmp_path):
    root = make_repo({**python_model_files("a"), "b/1/model.py": "x = 1\n"})
    runtime = Runtime(model_files={"a": {"config.pbtxt": b"replaced\n"}, "b": {"config.pbtxt": b"added\n"}})
    _, layers = written_layers(tmp_path, Repository.load(root), runtime=runtime)
    assert layers["a.files.tar"]["models/a/config.pbtxt"] == b"replaced\n"
    assert layers["b.files.tar"]["models/b/config.pbtxt"] == b"added\n"
    assert (root / "a" / "config.pbtxt").read_text() == python_config("a")
    assert not (root / "b" / "config.pbtxt").exists()


def test_the_layers_are_the_same_whatever_order_the_files_were_written_in(tmp_path):
    files = {
        f"m{i:03d}/{path}": text
        for i in range(150)
        for path, text in (("config.pbtxt", python_config(f"m{i:03d}")), ("1/model.py", f"x = {i}\n"), ("1/b.txt", "b"))
    }
    built = []
    for name, order in (("one", sorted(files)), ("two", sorted(files, reverse=True))):
        root = write_tree(tmp_path / name, {path: files[path] for path in order})
        found, _ = written_layers(tmp_path / name, Repository.load(root), base_layers=4)
        built.append(sorted((layer.name, layer.digest) for layer in found))
    assert built[0] == built[1] and len(built[0]) <= SLOTS


@pytest.mark.parametrize(
    ("base_layers", "room"), [(115, "only 3 are left"), (111, "only 7 are left"), (130, "no layer is left")]
)
def test_a_base_that_leaves_too_few_slots_is_refused_naming_the_counts(make_repo, base_layers, room):
    root = make_repo(python_model_files("a"))
    with pytest.raises(Refused) as refused:
        plan_image(Repository.load(root), "nvcr.io/x:1", max_layers=120, base_layers=base_layers)
    message = str(refused.value)
    assert f"nvcr.io/x:1 has {base_layers} layers" in message and "max_layers 120" in message
    assert room in message and f"at least {MIN_SLOTS}" in message and "triton-release.yaml" in message


def test_a_fingerprinted_layer_is_written_only_when_asked_for_and_its_digest_remembered(tmp_path):
    known, first, second = tmp_path / "known", tmp_path / "first", tmp_path / "second"
    for folder in (known, first, second):
        folder.mkdir()
    item = Item("dist/big-1.0-0123456789ab", {"opt/big/x.py": b"x" * 1000}, 1000, fingerprint="wheel-sha256:01")
    planned = plan([item], SLOTS)[0]
    layer = LayerTars(first, known).layer(planned)  # not remembered yet: written
    assert [p.name for p in first.iterdir()] == [f"{layer.digest}.tar"]  # named by its digest once written
    again = LayerTars(second, known)
    assert again.layer(planned) == layer and not any(second.iterdir())  # remembered: not written
    assert hashlib.sha256(again.tar(layer.digest).read_bytes()).hexdigest() == layer.digest  # written on demand


def test_a_tar_being_read_is_never_rewritten_under_its_reader_and_a_refused_write_leaves_nothing(tmp_path):
    """The upload reads a layer's tar while the build may write its layers again (a retry)."""
    weights = tmp_path / "w.bin"
    weights.write_bytes(b"first")
    planned = plan([Item("m.v1", {"models/m/1/w.bin": weights}, 5)], SLOTS)[0]
    folder = tmp_path / "tars"
    folder.mkdir()
    first = LayerTars(folder).layer(planned).digest
    with open(folder / f"{first}.tar", "rb") as reading:
        weights.write_bytes(b"other")  # a retry that finds other bytes: another tar, another name
        second = LayerTars(folder).layer(planned).digest
        assert second != first and hashlib.sha256(reading.read()).hexdigest() == first
    assert sorted(p.name for p in folder.iterdir()) == sorted([f"{first}.tar", f"{second}.tar"])
    ids = {str(weights): git_blob_id(b"committed")}
    with pytest.raises(Refused, match="changed while the release read it in place"):
        LayerTars(folder, None, ids).layer(planned)
    assert sorted(p.name for p in folder.iterdir()) == sorted([f"{first}.tar", f"{second}.tar"])


def test_whoever_is_ready_is_told_the_image_and_every_tar_written_by_its_diff_id(tmp_path):
    told = []
    planned = plan([Item("m.v1", {"models/m/1/w.bin": b"weights"}, 7)], SLOTS)[0]
    tars = LayerTars(tmp_path, ready=lambda diff_ids, written: told.append((list(diff_ids), dict(written))))
    digest = tars.layer(planned).digest
    tars.tell(["sha256:base", f"sha256:{digest}"])
    assert told == [(["sha256:base", f"sha256:{digest}"], {f"sha256:{digest}": tmp_path / f"{digest}.tar"})]
    LayerTars(tmp_path).tell(["sha256:base"])  # nobody to tell: nothing happens


def test_a_model_folder_s_layer_is_remembered_by_its_content_and_a_change_of_any_kind_is_seen(make_repo, tmp_path):
    root = make_repo(python_model_files("m"))
    known, written = tmp_path / "known", tmp_path / "written"
    known.mkdir(), written.mkdir()

    def digest_and_written(folder: Path) -> tuple[str, bool]:
        (planned,) = [p for p in plan_image(Repository.load(root), "b", max_layers=120) if p.name == "m.v1.tar"]
        layer = LayerTars(folder, known).layer(planned)
        return layer.digest, (folder / f"{layer.digest}.tar").exists()

    first, _ = digest_and_written(written)
    later = tmp_path / "later"
    later.mkdir()
    assert digest_and_written(later) == (first, False)  # the same content: remembered, not written
    seen = {first}
    model = root / "m" / "1" / "model.py"
    for change in (
        lambda: model.write_text(model.read_text() + "# edit\n"),
        lambda: model.chmod(0o755),
        lambda: (root / "m" / "1" / "data").mkdir(),
        lambda: model.rename(root / "m" / "1" / "main.py"),
    ):
        change()
        fresh = tmp_path / f"fresh{len(seen)}"
        fresh.mkdir()
        digest, wrote = digest_and_written(fresh)
        assert wrote and digest not in seen
        seen.add(digest)
    assert entries_fingerprint({"a": Executable(b"x")}) != entries_fingerprint({"a": b"x"})


def test_a_file_named_by_its_git_blob_id_is_not_read(tmp_path):
    weights = tmp_path / "w.bin"
    weights.write_bytes(b"committed")
    ids = {str(weights): "a" * 40}
    named = entries_fingerprint({"w.bin": weights}, ids)
    assert named != entries_fingerprint({"w.bin": weights})
    weights.write_bytes(b"anything else")  # the id vouches for the content: it is not read again
    assert entries_fingerprint({"w.bin": weights}, ids) == named
    assert entries_fingerprint({"w.bin": weights}, {str(weights): "b" * 40}) != named
    weights.chmod(0o755)  # the mode is still the file's own
    assert entries_fingerprint({"w.bin": weights}, ids) != named
    assert entries_fingerprint({"v.bin": weights}, ids) != named


def git_blob_id(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def test_a_file_named_by_its_blob_id_that_changed_under_the_release_is_refused_and_never_remembered(tmp_path):
    weights = tmp_path / "w.bin"
    weights.write_bytes(b"committed")
    ids = {str(weights): git_blob_id(b"committed")}
    planned = plan([Item("m.v1", {"models/m/1/w.bin": weights}, 9)], SLOTS)[0]
    known = tmp_path / "known"
    known.mkdir()
    tars = LayerTars(tmp_path, known, ids)
    good = tars.layer(planned).digest  # written, its bytes checked against the blob, remembered
    assert len(list(known.iterdir())) == 1
    weights.write_bytes(b"an edit after git status looked")
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    with pytest.raises(Refused, match="changed while the release read it in place"):
        LayerTars(tmp_path, fresh, ids).layer(planned)  # written now: the edit is seen
    assert not list(fresh.iterdir())
    later = LayerTars(tmp_path, known, ids)
    assert later.layer(planned).digest == good  # remembered: not read ...
    with pytest.raises(Refused, match="git blob"):
        later.tar(good)  # ... until the daemon needs the tar, and then the edit is seen


def test_a_remembered_digest_that_lies_is_forgotten(tmp_path):
    known = tmp_path / "known"
    known.mkdir()
    item = Item("dist/big-1.0-0123456789ab", {"opt/big/x.py": b"x"}, 1, fingerprint="wheel-sha256:01")
    planned = plan([item], SLOTS)[0]
    LayerTars(tmp_path, known).layer(planned)
    (remembered,) = known.iterdir()
    remembered.write_text("0" * 64)
    tars = LayerTars(tmp_path, known)
    with pytest.raises(StaleDigest):
        tars.tar(tars.layer(planned).digest)
    assert not remembered.exists()
    tars.forget()
    assert tars.layer(planned).digest != "0" * 64


def test_the_smallest_budget_still_builds():
    assert layer_slots(120, 120 - MIN_SLOTS - 2) == MIN_SLOTS
    planned = plan(tiny_models(1000), MIN_SLOTS)
    assert len(planned) <= MIN_SLOTS and sum(len(p.items) for p in planned) == 2000


def test_two_items_holding_one_file_apart_are_an_error(make_repo):
    root = make_repo(python_model_files("a"))
    clash = Runtime(extra=(Item("env/a", {"models/a/config.pbtxt": b"other\n"}, 6),))
    with pytest.raises(ValueError, match="models/a/config.pbtxt is in both"):
        plan_image(Repository.load(root), "base", runtime=clash)
    with pytest.raises(ValueError, match="not one of the model's other files"):
        plan_image(Repository.load(root), "base", runtime=Runtime(model_files={"a": {"1/x": b""}}))
