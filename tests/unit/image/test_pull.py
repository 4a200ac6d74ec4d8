"""The base's background pull: its progress, its failures as the release reports them, its stop."""

from __future__ import annotations

import json
import threading
from dataclasses import replace

import pytest

from triton_release import cache
from triton_release.errors import InfrastructureError, Refused
from triton_release.image.base import CACHE_FORMAT, BaseImage, parse_probe
from triton_release.image.pull import BackgroundPull, Pulled, PullProgress, pull_failure, pulled_as_inspected

IMAGE = "127.0.0.1:5000/team/tritonserver:24.10-py3"


class FakeImages:
    def get(self, name):
        return type("Image", (), {"id": "sha256:" + "a" * 64})()


class FakeApi:
    """The daemon's pull stream: `events`, then (with `gate`) a wait until the gate opens."""

    def __init__(self, events, gate=None):
        self.events, self.gate, self.closed = events, gate, False

    def pull(self, repository, tag, stream, decode):
        assert (repository, tag) == ("127.0.0.1:5000/team/tritonserver", "24.10-py3")
        yield from self.events
        if self.gate is not None:
            self.gate.wait(5)
            yield {"status": "Downloading", "id": "l2", "progressDetail": {"current": 1, "total": 2}}

    def close(self):
        self.closed = True
        if self.gate is not None:
            self.gate.set()


class FakeClient:
    def __init__(self, api):
        self.api, self.images = api, FakeImages()


def downloading(layer, current, total):
    return {"status": "Downloading", "id": layer, "progressDetail": {"current": current, "total": total}}


def test_a_pull_that_ends_gives_the_image_its_id_and_the_bytes_downloaded():
    events = [
        downloading("l1", 100, 300),
        downloading("l1", 300, 300),
        {"status": "Pull complete", "id": "l1"},
        {"status": "Already exists", "id": "l0"},
        {"status": "Status: Downloaded newer image"},
    ]
    pulled = BackgroundPull(FakeClient(FakeApi(events)), IMAGE).start().wait()
    assert (pulled.image, pulled.image_id, pulled.downloaded) == (IMAGE, "sha256:" + "a" * 64, 300)
    assert set(pulled.to_json()) == {"image", "image_id", "downloaded_bytes", "pull_seconds"}


def test_the_registrys_answer_is_the_error_naming_the_image():
    events = [{"error": "manifest unknown", "errorDetail": {"message": "manifest for x not found: manifest unknown"}}]
    with pytest.raises(Refused) as caught:
        BackgroundPull(FakeClient(FakeApi(events)), IMAGE).start().wait()
    assert IMAGE in caught.value.message and "manifest for x not found" in caught.value.message


@pytest.mark.parametrize(
    ("answer", "kind"),
    [
        ("manifest unknown", Refused),
        ("unauthorized: authentication required", Refused),
        ("denied: requested access to the resource is denied", Refused),
        ('Get "https://registry-1.docker.io/v2/": dial tcp: lookup registry-1.docker.io: no such host', Refused),
        ("write /var/lib/docker/tmp/x: no space left on device", InfrastructureError),
        ("Get https://nvcr.io/v2/: net/http: TLS handshake timeout", InfrastructureError),
    ],
)
def test_a_missing_image_or_a_refused_login_is_the_users_the_rest_the_machines(answer, kind):
    error = pull_failure(IMAGE, answer)
    assert type(error) is kind and IMAGE in error.message and answer in error.message


def test_a_stopped_pull_lets_its_stream_go_and_is_no_image():
    api = FakeApi([downloading("l1", 1, 2)], gate=threading.Event())
    pull = BackgroundPull(FakeClient(api), IMAGE).start()
    pull.stop()
    assert api.closed and not pull.running
    with pytest.raises(InfrastructureError, match="stopped before it ended"):
        pull.wait()


def test_progress_counts_each_layer_once_at_its_last_figure():
    progress = PullProgress()
    for event in (downloading("a", 10, 40), downloading("a", 40, 40), downloading("b", 5, 10), {"status": "x"}):
        progress.add(event)
    progress.add({"status": "Download complete", "id": "b"})
    assert progress.downloaded == 50
    assert "50 B of 50 B listed so far" in progress.line(IMAGE, 3)


def test_the_summary_says_the_rate_and_the_wait():
    assert "10.0 s, 1.0 MB/s); waited 2.0 s" in Pulled(IMAGE, "sha256:x", 10_000_000, 10.0, 2.0).summary()
    assert "done before it was needed" in Pulled(IMAGE, "sha256:x", 1, 1.0, 0.0).summary()


# -- the environments beside the pull, on the cache's inspection of the id the registry named --------


def inspection(image_id: str, python: str = "3.10", layers: int = 7) -> BaseImage:
    probe = [json.dumps({"env": {"triton": "2.51.0"}}), json.dumps({"python3": python})]
    found = parse_probe(IMAGE, image_id, "\n".join(probe))
    return replace(found, layers=layers)


def test_the_same_base_under_another_id_is_the_one_prepared():
    pulled_as_inspected(IMAGE, inspection("sha256:config"), inspection("sha256:manifest"))


def test_a_base_that_changed_while_it_was_pulled_is_refused_naming_both_and_a_rerun():
    with pytest.raises(InfrastructureError) as caught:
        pulled_as_inspected(IMAGE, inspection("sha256:before"), inspection("sha256:after", python="3.12"))
    message = caught.value.message
    assert IMAGE in message and "sha256:before" in message and "sha256:after" in message
    assert "rerun the release" in message and "Nothing was built or pushed" in message


def test_a_pull_goes_ahead_on_the_cache_only_for_the_id_the_registry_named(tmp_path):
    cache.configure({"TRITON_RELEASE_CACHE": str(tmp_path / "cache")})
    known = inspection("sha256:" + "c" * 64)
    folder = tmp_path / "cache" / "inspect"
    folder.mkdir(parents=True)
    (folder / f"sha256-{'c' * 64}.v{CACHE_FORMAT}.json").write_text(json.dumps(known.to_json()))
    client = FakeClient(FakeApi([]))
    assert BackgroundPull(client, IMAGE, "sha256:" + "c" * 64).ahead() == known
    assert BackgroundPull(client, IMAGE, "sha256:" + "d" * 64).ahead() is None
    assert BackgroundPull(client, IMAGE, "").ahead() is None
