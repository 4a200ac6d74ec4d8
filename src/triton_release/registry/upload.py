"""The release's blobs uploaded while its image is loaded and tested, and the manifest that names
them.

A blob no manifest names is invisible: no tag, no pull can reach it. So once the build has written
the new layers' tars (before the daemon loads them: its own copy of gigabytes of weights takes as
long as their upload), a background thread sends the registry the layers it lacks, while the
daemon loads the image and the server tests it, and nothing is tagged: only after every golden
case passed does the push upload the config (the image's labels may change after the tests) and
put the manifest under X.Y.Z.

- A new layer goes up as our own gzip of its tar (no timestamp: the same tar gives the same
  blob), streamed, its digest and size computed as it goes. A small tar (code, an unpacked
  wheel's files) is packed at zlib level 6, about 15 % smaller than level 1 and as small as the
  wheel itself, in a fraction of a second; a large one (weights) at level 1, unless samples of
  it show deflate saves under 3 % there (weights of random-looking bytes, which level 1 packs at
  about 65 MB/s for nothing): then its gzip stores it, at the speed of a copy.
- An unchanged layer (the base's included) is the blob the previous release's manifest names for
  its diff id (the config that manifest names lists them, in order): reused when the repository
  still holds it. Else a layer this build wrote a tar of may be a blob this machine uploaded
  before (a descriptor kept in the cache), when this repository holds it. Both come from outside
  the run, so both are checked before a blob is reused: the previous manifest lends its pairing
  only when it is byte for byte the manifest the ledger confirmed for that release
  (registry/ledger.py), its config the one the ledger recorded and the config's bytes its digest
  (a manifest rewritten since would make X.Y.Z name foreign blobs); the cache, restored from
  elsewhere (cache.py), lends only to a layer this build wrote a tar of, and only the very blob
  (digest and size) our gzip of that tar makes, never to a layer it wrote none of (the daemon
  held it), which nothing here can check its word against. A blob offered that this repository
  lacks (one uploaded to another repository of the registry) gives way to the next offer, then
  to an upload.
- When a layer has neither (a first release, a layer the daemon already held so no tar was
  written), or anything fails, the push goes through the Docker daemon instead, as without the
  overlap: correct first, fast second.
- `upload_during_tests: false` (--upload-during-tests false) turns the overlap off: nothing goes
  up before every golden case passed, then the daemon pushes (a registry whose quota counts blobs
  no manifest names, or one without garbage collection, never holds a refused release's layers).

A release refused after the upload began stops the thread; the blobs it sent stay unreferenced
until the registry's garbage collection removes them, and the run says so.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
import time
import zlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from triton_release.cache import cache_dir
from triton_release.contract import parse_digest
from triton_release.files import write_atomic
from triton_release.registry.client import Manifest, RegistryRepository, content_digest
from triton_release.registry.ledger import read_ledger
from triton_release.signals import shielded

SCHEMA2 = "application/vnd.docker.distribution.manifest.v2+json"  # what `docker push` writes
CONFIG_TYPE = "application/vnd.docker.container.image.v1+json"
GZIP_LAYER = "application/vnd.docker.image.rootfs.diff.tar.gzip"
CHUNK = 1 << 20  # bytes read from a tar at a time
SMALL_TAR = 8 << 20  # a tar up to this size is packed at SMALL_LEVEL, a larger one at LARGE_LEVEL
SMALL_LEVEL, LARGE_LEVEL, STORED = 6, 1, 0
SAMPLES, SAMPLE = 8, 256 << 10  # a large tar's samples, evenly spread, that tell whether it compresses
INCOMPRESSIBLE = 0.97  # packed / raw above this in the samples: the tar is stored
UPLOAD_DEADLINE = 6 * 3600.0  # seconds for one blob's answer: a 512 MiB layer on a slow link
STOP_WAIT = 30.0  # seconds a stopped upload has to end its request in flight


@dataclass(frozen=True)
class Descriptor:
    """A blob of a manifest: its media type, digest and size."""

    media_type: str
    digest: str
    size: int

    def to_json(self) -> dict:
        return {"mediaType": self.media_type, "size": self.size, "digest": self.digest}


def previous_descriptors(manifest: Manifest, config: Mapping) -> dict[str, Descriptor]:
    """Diff id -> the compressed blob that a docker schema2 `manifest` names for it (its `config`'s
    rootfs.diff_ids, in order, beside its layers). Empty for any other kind of manifest, or one
    whose layers and diff ids do not pair up."""
    if manifest.media_type != SCHEMA2:
        return {}
    try:
        layers = manifest.layers
        diff_ids = list((config.get("rootfs") or {}).get("diff_ids") or [])
    except (ValueError, AttributeError):
        return {}
    if not layers or len(layers) != len(diff_ids):
        return {}
    found = {}
    for diff_id, layer in zip(diff_ids, layers):
        if not isinstance(layer, dict) or layer.get("mediaType") != GZIP_LAYER:
            continue
        digest, size = str(layer.get("digest", "")), layer.get("size")
        if parse_digest(digest) is not None and isinstance(size, int) and size > 0:
            found[str(diff_id)] = Descriptor(GZIP_LAYER, digest, size)
    return found


def image_manifest(config: bytes, layers: Sequence[Descriptor]) -> Manifest:
    """The docker schema2 manifest of the image whose config is `config` and whose layers are
    `layers`, in order; its digest is the sha256 of these bytes."""
    body = {
        "schemaVersion": 2,
        "mediaType": SCHEMA2,
        "config": Descriptor(CONFIG_TYPE, content_digest(config), len(config)).to_json(),
        "layers": [layer.to_json() for layer in layers],
    }
    return Manifest.of(SCHEMA2, json.dumps(body, indent=3).encode())


class Stopped(Exception):
    """The upload was stopped (a refused release, a signal)."""


def gzip_chunks(tar: Path, stop: threading.Event | None = None) -> Iterator[bytes]:
    """The gzip of the file `tar`, a chunk at a time (mtime 0 and a level set by its size and
    samples of its bytes: deterministic); stops with `Stopped` once `stop` is set."""
    with open(tar, "rb") as handle:
        size = os.fstat(handle.fileno()).st_size
        level = SMALL_LEVEL if size <= SMALL_TAR else STORED if _incompressible(handle, size) else LARGE_LEVEL
        packer = zlib.compressobj(level, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
        while chunk := handle.read(CHUNK):
            if stop is not None and stop.is_set():
                raise Stopped("the upload was stopped")
            if packed := packer.compress(chunk):
                yield packed
    yield packer.flush()


def gzip_descriptor(tar: Path, stop: threading.Event | None = None) -> Descriptor:
    """The blob our gzip of `tar` makes (gzip_chunks: deterministic), its digest and size, made
    here without sending it."""
    sha, size = hashlib.sha256(), 0
    for chunk in gzip_chunks(tar, stop):
        sha.update(chunk)
        size += len(chunk)
    return Descriptor(GZIP_LAYER, f"sha256:{sha.hexdigest()}", size)


def _incompressible(handle: IO[bytes], size: int) -> bool:
    """Whether deflate saves under 3 % on SAMPLES pieces of the file, evenly spread (the same file,
    the same answer); the handle is left at the start."""
    raw = packed = 0
    for index in range(SAMPLES):
        handle.seek(index * max(0, size - SAMPLE) // max(1, SAMPLES - 1))
        piece = handle.read(SAMPLE)
        raw, packed = raw + len(piece), packed + len(zlib.compress(piece, LARGE_LEVEL))
    handle.seek(0)
    return raw > 0 and packed > INCOMPRESSIBLE * raw


def _known_file(diff_id: str) -> Path:
    return cache_dir() / "blobs" / (diff_id.split(":", 1)[-1] + ".json")


def known_descriptor(diff_id: str) -> Descriptor | None:
    """The gzip blob uploaded from this machine before for the layer `diff_id`, if kept."""
    try:
        data = json.loads(_known_file(diff_id).read_text(encoding="utf-8"))
        found = Descriptor(GZIP_LAYER, str(data["digest"]), int(data["size"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return found if parse_digest(found.digest) is not None and found.size > 0 else None


def remember_descriptor(diff_id: str, descriptor: Descriptor) -> None:
    write_atomic(_known_file(diff_id), json.dumps({"digest": descriptor.digest, "size": descriptor.size}))


@dataclass(frozen=True)
class Uploaded:
    """What the upload beside the load and the tests did: blobs sent (and their bytes, compressed),
    blobs the repository already held (reused), and why its blobs cannot make the manifest, if they
    cannot."""

    blobs: int
    bytes: int
    reused: int
    missing: str = ""  # why the push goes through the daemon instead; "" when every layer is up
    referenced: bool = False  # whether a manifest (X.Y.Z) names them
    seconds: float = 0.0  # the upload thread's own time, from its start to its end (so far, if running)

    def to_json(self) -> dict:
        return {
            "blobs_uploaded": self.blobs,
            "bytes_uploaded": self.bytes,
            "blobs_reused": self.reused,
            "referenced": self.referenced,
            "not_used_because": self.missing or None,
            "seconds": round(self.seconds, 3),
        }


class BackgroundUpload:
    """The upload of an image's layers to `registry` in a thread, started by `start()`; the push
    takes its layers with `layers()` (waiting for it), a refused release stops it with `stop()`.
    `tars`: diff id -> the tar of each layer written by the build (the new ones); `previous`: the
    release before, X.Y.Z, whose blobs are reused."""

    def __init__(
        self,
        registry: RegistryRepository,
        diff_ids: Sequence[str],
        tars: Mapping[str, Path],
        previous: str | None,
    ) -> None:
        # a client of its own: a session is not shared between threads
        self.registry = RegistryRepository(
            registry.host, registry.name, registry.credentials, registry.trust, ref=str(registry)
        )
        self.registry.deadline = UPLOAD_DEADLINE
        self.diff_ids, self.tars, self.previous = list(diff_ids), dict(tars), previous
        self.descriptors: dict[str, Descriptor] = {}
        self.sent = self.sent_bytes = self.reused = 0
        self.missing = ""
        self.referenced = False
        self._stop = threading.Event()
        self._started = self._ended = 0.0  # perf_counter at the thread's start and end
        self._thread = threading.Thread(target=self._run, name="triton-release-upload", daemon=True)

    def start(self) -> BackgroundUpload:
        self._thread.start()
        return self

    def _run(self) -> None:
        self._started = time.perf_counter()
        try:
            self._upload()
        except BaseException as exc:  # said in the report; the push goes through the daemon
            self.missing = "stopped" if self._stop.is_set() else f"the upload failed: {exc}".strip()
        finally:
            self._ended = time.perf_counter()

    @property
    def seconds(self) -> float:
        """The thread's time: from its start to its end, or to now while it runs; 0 before it starts."""
        if not self._started:
            return 0.0
        return (self._ended or time.perf_counter()) - self._started

    def _upload(self) -> None:
        known, unconfirmed = self._previous_pairing()
        for diff_id in dict.fromkeys(self.diff_ids):
            if self._stop.is_set():
                self.missing = "stopped"
                return
            tar = self.tars.get(diff_id)
            found = self._reusable(diff_id, tar, known)
            if found is not None:
                self.descriptors[diff_id] = found
                self.reused += 1
                continue
            if tar is None:
                self.missing = f"layer {diff_id[:19]} is neither in the registry nor written by this build" + (
                    f" ({unconfirmed})" if unconfirmed else ""
                )
                return
            digest, size = self.registry.stream_blob(gzip_chunks(tar, self._stop))
            self.descriptors[diff_id] = found = Descriptor(GZIP_LAYER, digest, size)
            self.sent += 1
            self.sent_bytes += size
            remember_descriptor(diff_id, found)

    def _previous_pairing(self) -> tuple[dict[str, Descriptor], str]:
        """Diff id -> blob of the previous release's manifest, when that manifest is the one the
        ledger confirmed for it (the digest its push read back), its diff ids read from the config
        that very manifest names (the ledger's too, its bytes checked against its digest); else
        none, and why."""
        if not self.previous:
            return {}, ""
        manifest = self.registry.manifest(self.previous)
        if manifest is None or manifest.media_type != SCHEMA2:
            return {}, ""
        entry = read_ledger(self.registry).entries.get(self.previous)
        if entry is None or not entry.digest:
            return {}, f"the ledger confirms no manifest of {self.previous}, so its layer pairing is not reused"
        if entry.digest != manifest.digest:
            return {}, (
                f"{self.previous}'s manifest is {manifest.digest[:19]}, not {entry.digest[:19]} as its push "
                "confirmed in the ledger: it was rewritten, and its layer pairing is not reused"
            )
        named = manifest.config_digest
        if named != entry.config or parse_digest(named) is None:
            return {}, (
                f"{self.previous}'s manifest names the config {named[:19]}, not {entry.config[:19]} as the "
                "ledger says it was built with, so its layer pairing is not reused"
            )
        body = self.registry.blob(named)
        if content_digest(body) != named:
            return {}, f"the registry's config blob {named[:19]} of {self.previous} does not match its digest"
        try:
            config = json.loads(body)
        except ValueError:
            return {}, f"the config {named[:19]} of {self.previous} is not JSON"
        return previous_descriptors(manifest, config if isinstance(config, dict) else {}), ""

    def _reusable(self, diff_id: str, tar: Path | None, known: Mapping[str, Descriptor]) -> Descriptor | None:
        """The blob this repository holds to reuse for layer `diff_id`, or None. Asked in order: the
        confirmed previous manifest's (`known`), then this machine's cache, which lends only to a
        layer this build wrote a tar of and only the very blob, digest and size, our gzip of that tar
        makes (the cache is restored from elsewhere: a hint, checked before use; our gzip is made
        only when the cache offers one). Each is asked of the registry (HEAD): one it lacks (a blob
        uploaded to another repository) gives way to the next."""
        offered = known.get(diff_id)
        if offered is not None and self.registry.has_blob(offered.digest):
            return offered
        cached = known_descriptor(diff_id) if tar is not None else None
        if tar is None or cached is None or cached == offered or cached != gzip_descriptor(tar, self._stop):
            return None
        return cached if self.registry.has_blob(cached.digest) else None

    def result(self) -> Uploaded:
        return Uploaded(self.sent, self.sent_bytes, self.reused, self.missing, self.referenced, self.seconds)

    def layers(self, diff_ids: Sequence[str]) -> list[Descriptor] | None:
        """The blobs of the layers `diff_ids`, once the upload is done (waiting for it); None when
        one is missing (then `result().missing` says why)."""
        while self._thread.is_alive():
            self._thread.join(1.0)  # a signal is raised here, between two waits
        if list(diff_ids) != self.diff_ids and not self.missing:
            self.missing = "the image pushed has other layers than the one uploaded"
        if self.missing:
            return None
        return [self.descriptors[diff_id] for diff_id in diff_ids]

    def stop(self) -> Uploaded:
        """Stop the upload (its current chunk ends its request) and wait for the thread to end."""
        self._stop.set()
        with shielded():
            if self._thread.ident is not None:
                self._thread.join(STOP_WAIT)
        return self.result()
