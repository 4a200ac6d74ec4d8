"""The upload beside the tests, without Docker: the previous release's blobs mapped to diff ids,
our manifest's bytes, our gzip, and when the push must fall back to the Docker daemon."""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import threading
import zlib

import pytest

from support.registries import FakeRegistry
from triton_release import cache
from triton_release.action.inputs import ActionInputs
from triton_release.cli.common import given_settings
from triton_release.cli.main import parser
from triton_release.contract import ledger_entry_tag
from triton_release.image.assemble import config_of, remember_config
from triton_release.registry import ledger, publish
from triton_release.registry.client import Manifest, RegistryRepository
from triton_release.registry.upload import (
    CONFIG_TYPE,
    GZIP_LAYER,
    LARGE_LEVEL,
    SCHEMA2,
    SMALL_LEVEL,
    SMALL_TAR,
    STORED,
    BackgroundUpload,
    Descriptor,
    Stopped,
    gzip_chunks,
    gzip_descriptor,
    image_manifest,
    known_descriptor,
    previous_descriptors,
    remember_descriptor,
)
from triton_release.settings import resolve

OCI = "application/vnd.oci.image.manifest.v1+json"


def sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def docker_manifest(layers: list[dict], media_type: str = SCHEMA2) -> Manifest:
    body = {"schemaVersion": 2, "mediaType": media_type, "config": {}, "layers": layers}
    return Manifest.of(media_type, json.dumps(body).encode())


def layer(n: int, media_type: str = GZIP_LAYER) -> dict:
    return {"mediaType": media_type, "size": 100 + n, "digest": "sha256:" + f"{n}" * 64}


@pytest.fixture(autouse=True)
def own_cache(tmp_path, monkeypatch):
    monkeypatch.setattr(cache, "_root", tmp_path / "cache")


def test_the_previous_releases_blobs_are_paired_with_its_configs_diff_ids_in_order():
    manifest = docker_manifest([layer(1), layer(2)])
    found = previous_descriptors(manifest, {"rootfs": {"diff_ids": ["sha256:" + "a" * 64, "sha256:" + "b" * 64]}})
    assert found == {
        "sha256:" + "a" * 64: Descriptor(GZIP_LAYER, "sha256:" + "1" * 64, 101),
        "sha256:" + "b" * 64: Descriptor(GZIP_LAYER, "sha256:" + "2" * 64, 102),
    }


@pytest.mark.parametrize(
    ("manifest", "diff_ids"),
    [
        (docker_manifest([layer(1)], OCI), ["sha256:" + "a" * 64]),  # not what docker push writes
        (docker_manifest([layer(1), layer(2)]), ["sha256:" + "a" * 64]),  # layers and diff ids do not pair
        (docker_manifest([]), []),
    ],
)
def test_a_manifest_that_does_not_pair_up_gives_no_blob(manifest, diff_ids):
    assert previous_descriptors(manifest, {"rootfs": {"diff_ids": diff_ids}}) == {}


def test_a_layer_of_another_media_type_is_not_reused():
    manifest = docker_manifest([layer(1, "application/vnd.docker.image.rootfs.foreign.diff.tar.gzip"), layer(2)])
    found = previous_descriptors(manifest, {"rootfs": {"diff_ids": ["sha256:" + "a" * 64, "sha256:" + "b" * 64]}})
    assert list(found) == ["sha256:" + "b" * 64]


def test_our_manifest_is_docker_schema2_naming_the_config_by_its_sha256_and_the_layers_in_order():
    config = b'{"architecture":"amd64"}'
    layers = [Descriptor(GZIP_LAYER, "sha256:" + "1" * 64, 10), Descriptor(GZIP_LAYER, "sha256:" + "2" * 64, 20)]
    manifest = image_manifest(config, layers)
    body = json.loads(manifest.body)
    assert manifest.media_type == body["mediaType"] == SCHEMA2 and body["schemaVersion"] == 2
    assert body["config"] == {"mediaType": CONFIG_TYPE, "size": len(config), "digest": sha(config)}
    assert [entry["digest"] for entry in body["layers"]] == [d.digest for d in layers]
    assert all(entry["mediaType"] == GZIP_LAYER for entry in body["layers"])
    assert manifest.digest == sha(manifest.body) and manifest.config_digest == sha(config)
    assert image_manifest(config, layers).body == manifest.body  # the same inputs, the same digest


def test_our_gzip_is_the_tar_once_unpacked_and_the_same_bytes_every_time(tmp_path):
    tar = tmp_path / "layer.tar"
    tar.write_bytes(bytes(range(256)) * 20000)
    packed = b"".join(gzip_chunks(tar))
    assert gzip.decompress(packed) == tar.read_bytes()
    assert b"".join(gzip_chunks(tar)) == packed


def test_a_small_tar_is_packed_at_the_tighter_level_and_a_large_one_at_the_faster(tmp_path):
    text = b"".join(b"def f%d(x):\n    return x * %d  # a line of code\n" % (i, i) for i in range(20000))
    small, large = tmp_path / "small.tar", tmp_path / "large.tar"
    small.write_bytes(text)
    large.write_bytes(text * (SMALL_TAR // len(text) + 1))
    for tar, level in ((small, SMALL_LEVEL), (large, LARGE_LEVEL)):
        packer = zlib.compressobj(level, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
        assert b"".join(gzip_chunks(tar)) == packer.compress(tar.read_bytes()) + packer.flush()
    assert SMALL_LEVEL > LARGE_LEVEL


def test_a_large_tar_that_does_not_compress_is_stored_in_its_gzip(tmp_path, monkeypatch):
    noise, text = tmp_path / "weights.tar", tmp_path / "text.tar"
    with open(noise, "wb") as handle:
        for _ in range(SMALL_TAR // (1 << 20) + 2):
            handle.write(os.urandom(1 << 20))
    text.write_bytes(b"a line of a large text file\n" * (SMALL_TAR // 28 + 1))
    levels, compressobj = [], zlib.compressobj

    def packer(level, *args):
        levels.append(level)
        return compressobj(level, *args)

    monkeypatch.setattr("triton_release.registry.upload.zlib.compressobj", packer)
    packed = b"".join(gzip_chunks(noise))
    assert gzip.decompress(packed) == noise.read_bytes() and b"".join(gzip_chunks(noise)) == packed
    b"".join(gzip_chunks(text))
    assert levels == [STORED, STORED, LARGE_LEVEL]


def test_a_stopped_gzip_stops_between_chunks(tmp_path):
    tar = tmp_path / "layer.tar"
    tar.write_bytes(b"x" * (3 << 20))
    stop = threading.Event()
    chunks = gzip_chunks(tar, stop)
    stop.set()
    with pytest.raises(Stopped):
        next(chunks)


class BlobStore:
    """What a registry does with blobs, for FakeRegistry's hook: HEAD, GET, POST, a chunked PATCH,
    the closing PUT checked against its digest."""

    def __init__(self) -> None:
        self.blobs: dict[str, bytes] = {}
        self.partial = b""

    def __call__(self, handler) -> bool:
        path = handler.path.split("?", 1)[0]
        if "/blobs/" not in path:
            return False
        if handler.command in ("HEAD", "GET"):
            held = self.blobs.get(path.rsplit("/", 1)[1])
            handler._send(404 if held is None else 200, held)
        elif handler.command == "POST":
            self.partial = b""
            handler._send(202, None, {"Location": path + "session-1"})
        elif handler.command == "PATCH":
            self.partial += read_chunked(handler)
            handler._send(202, None, {"Location": path})
        elif handler.command == "PUT":
            digest = handler.path.split("digest=", 1)[1].replace("%3A", ":")
            body = self.partial + handler.rfile.read(int(handler.headers.get("Content-Length") or 0))
            if sha(body) != digest:
                handler._send(400, {"errors": [{"code": "DIGEST_INVALID"}]})
            else:
                self.blobs[digest] = body
                handler._send(201)
        return True


def read_chunked(handler) -> bytes:
    data = b""
    if handler.headers.get("Transfer-Encoding", "").lower() != "chunked":
        return handler.rfile.read(int(handler.headers.get("Content-Length") or 0))
    while size := int(handler.rfile.readline().split(b";")[0].strip() or b"0", 16):
        data += handler.rfile.read(size)
        handler.rfile.readline()
    handler.rfile.readline()
    return data


def test_new_layers_are_streamed_as_gzip_and_a_blob_known_from_before_is_reused(tmp_path):
    tar = tmp_path / "a.tar"
    tar.write_bytes(b"model a, version 2" * 100000)
    diff_id = sha(tar.read_bytes())
    store = BlobStore()
    with FakeRegistry(auth=False, tags=(), hook=store) as fake:
        registry = RegistryRepository.parse(f"{fake.address}/team/models")
        upload = BackgroundUpload(registry, [diff_id], {diff_id: tar}, None).start()
        layers = upload.layers([diff_id])
        assert layers is not None and upload.result().blobs == 1, upload.result()
        assert gzip.decompress(store.blobs[layers[0].digest]) == tar.read_bytes()
        assert layers[0].size == len(store.blobs[layers[0].digest])
        assert known_descriptor(diff_id) == layers[0]
        done = upload.result()
        assert done.seconds > 0 and done.to_json()["seconds"] == round(done.seconds, 3)
        assert upload.seconds == done.seconds  # the thread ended: its time no longer grows
        # the next build that writes the same layer's tar reuses it: the blob our gzip of it makes
        again = BackgroundUpload(registry, [diff_id], {diff_id: tar}, None).start()
        assert again.layers([diff_id]) == layers and again.result().reused == 1 and again.result().blobs == 0
        # a build that wrote no tar of it (the daemon held it) cannot check the cache's word: the daemon pushes
        unchecked = BackgroundUpload(registry, [diff_id], {}, None).start()
        assert unchecked.layers([diff_id]) is None and "neither in the registry" in unchecked.result().missing


def test_an_upload_not_started_took_no_time():
    upload = BackgroundUpload(RegistryRepository.parse("127.0.0.1:9/team/models"), [], {}, None)
    assert upload.seconds == 0.0 and upload.result().seconds == 0.0


@pytest.mark.parametrize(
    ("given", "on"),
    [({}, True), ({"upload_during_tests": "true"}, True), ({"upload_during_tests": "false"}, False)],
)
def test_the_upload_during_the_tests_is_on_unless_the_setting_turns_it_off(given, on, tmp_path):
    assert resolve(given, cwd=tmp_path).publish.upload_during_tests is on


def test_no_upload_during_tests_on_the_command_line_turns_it_off(tmp_path):
    args = parser().parse_args(["release", "--to", "r", "--upload-during-tests", "false"])
    assert resolve(given_settings(args), cwd=tmp_path).publish.upload_during_tests is False
    inputs = ActionInputs.from_env({"INPUT_UPLOAD-DURING-TESTS": "false"})
    assert resolve({}, action_inputs=inputs.settings, cwd=tmp_path).publish.upload_during_tests is False


def test_a_layer_with_neither_a_blob_nor_a_tar_sends_the_push_through_the_daemon():
    registry = RegistryRepository.parse("127.0.0.1:9/team/models")  # never asked
    upload = BackgroundUpload(registry, ["sha256:" + "a" * 64], {}, None).start()
    assert upload.layers(["sha256:" + "a" * 64]) is None
    assert "neither in the registry nor written by this build" in upload.result().missing


def test_an_upload_error_sends_the_push_through_the_daemon(tmp_path):
    tar = tmp_path / "a.tar"
    tar.write_bytes(b"a")
    with FakeRegistry(status=500) as fake:
        registry = RegistryRepository.parse(f"{fake.address}/team/models")
        diff_id = sha(b"a")
        upload = BackgroundUpload(registry, [diff_id], {diff_id: tar}, None)
        upload.registry.deadline = 5.0
        upload.start()
        assert upload.layers([diff_id]) is None
        assert upload.result().missing.startswith("the upload failed")


def test_an_image_with_other_layers_than_the_upload_is_pushed_by_the_daemon():
    upload = BackgroundUpload(RegistryRepository.parse("127.0.0.1:9/team/models"), [], {}, None).start()
    assert upload.layers(["sha256:" + "a" * 64]) is None
    assert "other layers" in upload.result().missing


class LocalImage:
    """What push reads of a local image: its id and layers (a docker Image's attributes)."""

    def __init__(self, config: bytes) -> None:
        self.id = sha(config)
        self.attrs = {"RootFS": {"Layers": json.loads(config)["rootfs"]["diff_ids"]}}


def test_the_manifest_is_written_only_with_the_images_own_config_kept_here(tmp_path):
    config = json.dumps({"rootfs": {"diff_ids": []}, "config": {"Labels": {"a": "b"}}}).encode()
    upload = BackgroundUpload(RegistryRepository.parse("127.0.0.1:9/team/models"), [], {}, None).start()
    written, _ = publish._our_manifest(LocalImage(config), upload)  # never put together here
    assert written is None and "config" in upload.result().missing
    remember_config(config)
    assert config_of(sha(config)) == config
    upload = BackgroundUpload(RegistryRepository.parse("127.0.0.1:9/team/models"), [], {}, None).start()
    written, sent = publish._our_manifest(LocalImage(config), upload)
    assert written is not None and sent == config and written.config_digest == sha(config)


def test_a_kept_config_that_does_not_match_its_id_is_not_used():
    config = b'{"rootfs":{"diff_ids":[]}}'
    remember_config(config)
    (cache.cache_dir() / "configs" / (sha(config)[7:] + ".json")).write_bytes(b'{"tampered":1}')
    assert config_of(sha(config)) is None


def test_no_upload_means_the_daemon_pushes():
    assert publish._our_manifest(LocalImage(b'{"rootfs":{"diff_ids":[]}}'), None) == (None, b"")


def test_a_stopped_upload_ends_its_thread_and_says_its_blobs_are_unreferenced():
    upload = BackgroundUpload(RegistryRepository.parse("127.0.0.1:9/team/models"), [], {}, None).start()
    left = upload.stop()
    assert not upload._thread.is_alive() and left.referenced is False
    assert left.to_json()["referenced"] is False


def test_a_push_failing_before_it_sent_any_manifest_says_so_and_the_release_is_not_maybe_published():
    """A registry gone as the push begins (the upload beside the tests ended, X.Y.Z not yet asked
    for): the error carries manifest_sent False, so the release undoes its bump rather than keep it
    for a rerun to finish (tests/faults/test_infrastructure_faults.py shows it on a real registry)."""
    from triton_release.errors import InfrastructureError

    class Images:
        def get(self, image):
            return LocalImage(b'{"rootfs":{"diff_ids":[]}}')

    class Client:
        images = Images()

    registry = RegistryRepository.parse("127.0.0.1:9/team/models")  # nothing listens there
    registry.deadline = 2.0
    with pytest.raises(InfrastructureError) as raised:
        publish.push("candidate", registry, "1.1.0", client=Client())
    assert publish.manifest_sent(raised.value) is False


class Previous:
    """A registry (FakeRegistry and its BlobStore) holding release 1.0.0 of two layers, `a` (our
    gzip of its tar, as this build would write it) and `base` (a blob the daemon pushed), its
    config's diff ids in order, and the ledger's entry confirming its manifest and config."""

    def __init__(self, tmp_path, fake: FakeRegistry, store: BlobStore) -> None:
        self.fake, self.store = fake, store
        self.registry = RegistryRepository.parse(f"{fake.address}/team/models")
        self.tar = tmp_path / "a.tar"
        self.tar.write_bytes(b"model a, version 1" * 1000)
        self.a, self.base = sha(self.tar.read_bytes()), sha(b"the base layer's tar")
        self.ours = gzip_descriptor(self.tar)
        store.blobs[self.ours.digest] = b"".join(gzip_chunks(self.tar))
        packed = gzip.compress(b"the base layer's tar", mtime=0)
        self.daemons = Descriptor(GZIP_LAYER, sha(packed), len(packed))
        store.blobs[self.daemons.digest] = packed
        self.config = json.dumps({"rootfs": {"type": "layers", "diff_ids": [self.base, self.a]}}).encode()
        store.blobs[sha(self.config)] = self.config
        self.manifest = image_manifest(self.config, [self.daemons, self.ours])
        self.put("1.0.0", self.manifest)
        self.confirm(self.manifest.digest, sha(self.config))

    def put(self, reference: str, manifest: Manifest) -> None:
        self.fake.manifests[reference] = self.fake.manifests[manifest.digest] = (manifest.media_type, manifest.body)

    def confirm(self, digest: str, config: str) -> None:
        entry = ledger.Ledger().confirming("1.0.0", "c" * 40, config, digest, {})
        tag = ledger_entry_tag("1.0.0", "confirmed", digest)
        ledger.write_entry(self.registry, tag, entry)
        self.fake.tags = ["1.0.0", tag]

    def upload(self, tars: dict | None = None) -> BackgroundUpload:
        tars = {self.a: self.tar} if tars is None else tars
        return BackgroundUpload(self.registry, [self.base, self.a], tars, "1.0.0")


@pytest.fixture
def previous(tmp_path):
    store = BlobStore()
    with FakeRegistry(auth=False, tags=(), hook=store) as fake:
        yield Previous(tmp_path, fake, store)


def test_the_ledger_confirmed_previous_manifest_lends_its_pairing_read_from_its_own_config(previous):
    paired, why = previous.upload()._previous_pairing()
    assert why == "" and paired == {previous.base: previous.daemons, previous.a: previous.ours}
    upload = previous.upload().start()
    assert upload.layers([previous.base, previous.a]) == [previous.daemons, previous.ours]
    assert upload.result().reused == 2 and upload.result().blobs == 0


def test_a_rewritten_previous_manifest_lends_no_pairing_and_says_why(previous):
    """1.0.0 put again with its two layers' blobs swapped: each a blob the repository holds, yet
    not the manifest the ledger confirmed (#48 item 4)."""
    body = json.loads(previous.manifest.body)
    body["layers"].reverse()
    previous.put("1.0.0", Manifest.of(SCHEMA2, json.dumps(body).encode()))
    paired, why = previous.upload()._previous_pairing()
    assert paired == {} and "it was rewritten, and its layer pairing is not reused" in why
    upload = previous.upload().start()
    assert upload.layers([previous.base, previous.a]) is None
    assert upload.result().missing.endswith(f"({why})") and upload.result().blobs == 0


def test_a_previous_manifest_the_ledger_never_confirmed_lends_no_pairing(previous):
    previous.fake.tags = ["1.0.0"]
    paired, why = previous.upload()._previous_pairing()
    assert paired == {} and "the ledger confirms no manifest of 1.0.0" in why


def test_the_pairing_is_read_from_the_config_the_ledger_recorded_and_its_bytes_checked(previous):
    other = b'{"rootfs": {"type": "layers", "diff_ids": []}}'
    previous.confirm(previous.manifest.digest, sha(other))  # the ledger names another build's config
    paired, why = previous.upload()._previous_pairing()
    assert paired == {} and "not reused" in why and sha(other)[:19] in why
    previous.confirm(previous.manifest.digest, sha(previous.config))
    previous.store.blobs[sha(previous.config)] = previous.config.replace(b"layers", b"layerz")  # the registry lies
    paired, why = previous.upload()._previous_pairing()
    assert paired == {} and "does not match its digest" in why


def test_the_confirmed_previous_manifest_lends_its_blob_to_any_layer_it_pairs(previous):
    """The pairing of the manifest the ledger confirmed is the one its push wrote: its blob is
    reused for a layer this build wrote a tar of too (the daemon's gzip of it, when the daemon
    pushed the previous release), where the repository holds it; else the layer goes up."""
    upload, a, tar = previous.upload(), previous.a, previous.tar
    assert upload._reusable(a, tar, {a: previous.daemons}) == previous.daemons
    assert upload._reusable(a, None, {a: previous.daemons}) == previous.daemons
    gone = Descriptor(GZIP_LAYER, "sha256:" + "e" * 64, 404)  # a blob this repository lacks
    assert upload._reusable(a, tar, {a: gone}) is None and upload._reusable(a, None, {a: gone}) is None
    assert upload._reusable(a, tar, {}) is None  # nothing offered: uploaded


def test_the_cache_lends_a_blob_only_to_a_layer_this_build_wrote_and_only_our_gzip_of_it(previous):
    """The cache is restored from elsewhere: its word for a layer is taken only where this build's
    tar checks it (#48 item 4), and a cached blob this repository lacks gives way to an upload."""
    ours, tar, a, base = previous.ours, previous.tar, previous.a, previous.base
    assert ours.digest == sha(b"".join(gzip_chunks(tar))) and ours.size == len(b"".join(gzip_chunks(tar)))
    upload = previous.upload()
    remember_descriptor(a, previous.daemons)  # a blob the repository holds, not our gzip of the tar
    assert upload._reusable(a, tar, {}) is None
    remember_descriptor(a, Descriptor(GZIP_LAYER, ours.digest, ours.size + 1))  # our digest, another size
    assert upload._reusable(a, tar, {}) is None
    remember_descriptor(a, ours)
    assert upload._reusable(a, tar, {}) == ours
    assert upload._reusable(a, None, {}) is None  # no tar to check it against: not lent
    remember_descriptor(base, previous.daemons)
    assert upload._reusable(base, None, {}) is None
    gone = Descriptor(GZIP_LAYER, "sha256:" + "e" * 64, 404)
    assert upload._reusable(a, tar, {a: gone}) == ours  # the previous manifest's is not here: the cache's
    del previous.store.blobs[ours.digest]  # uploaded to another repository, say
    assert upload._reusable(a, tar, {}) is None


def test_our_gzip_is_made_only_when_the_cache_offers_a_blob(previous, monkeypatch):
    made = []

    def counted(tar, stop=None):
        made.append(tar)
        return gzip_descriptor(tar, stop)

    monkeypatch.setattr("triton_release.registry.upload.gzip_descriptor", counted)
    upload, a, tar = previous.upload(), previous.a, previous.tar
    assert upload._reusable(a, tar, {a: previous.daemons}) == previous.daemons and made == []
    assert upload._reusable(a, tar, {}) is None and made == []  # nothing cached: uploaded, its gzip made once
    remember_descriptor(a, previous.ours)
    assert upload._reusable(a, tar, {}) == previous.ours and made == [tar]


def test_a_cached_blob_this_repository_lacks_gives_way_to_the_previous_manifests(previous):
    """The release after a first one on a machine whose cache holds our gzip of a layer uploaded
    to another repository, where this one holds the daemon's (the previous release went up through
    the daemon): the cache's blob answers 404 here, the previous manifest's is reused, and the
    upload goes on rather than sending the push through the daemon."""
    foreign = Descriptor(GZIP_LAYER, "sha256:" + "e" * 64, 404)  # in no blob of this repository
    remember_descriptor(previous.base, foreign)
    remember_descriptor(previous.a, foreign)
    upload = previous.upload({}).start()  # the daemon held both layers: no tar written
    assert upload.layers([previous.base, previous.a]) == [previous.daemons, previous.ours]
    assert upload.result().missing == "" and upload.result().reused == 2
    assert ("HEAD", f"/v2/team/models/blobs/{foreign.digest}") not in previous.fake.requests
