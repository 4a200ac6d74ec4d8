"""The image config and the load archive, without Docker."""

from __future__ import annotations

import hashlib
import io
import json
import os
import tarfile
import threading

import pytest

from triton_release.image.assemble import assemble, image_config, present_prefix, streamed, write_archive

BASE = {
    "Architecture": "amd64",
    "Os": "linux",
    "Config": {
        "Env": ["PATH=/usr/bin"],
        "Entrypoint": ["/entry.sh"],
        "Cmd": ["bash"],
        "Hostname": "abc",
        "Labels": {"vendor": "nvidia"},
        "WorkingDir": "/opt",
        "Volumes": None,
    },
}


def test_the_config_keeps_the_base_s_image_settings_and_adds_labels_and_the_command():
    config = json.loads(
        image_config(BASE, ["sha256:a", "sha256:b"], {"x": "1"}, ["tritonserver"], "2026-01-01T00:00:00Z")
    )
    assert config["config"] == {
        "Env": ["PATH=/usr/bin"],
        "Entrypoint": ["/entry.sh"],
        "Cmd": ["tritonserver"],
        "Labels": {"vendor": "nvidia", "x": "1"},
        "WorkingDir": "/opt",
    }
    assert config["rootfs"] == {"type": "layers", "diff_ids": ["sha256:a", "sha256:b"]}
    assert (config["architecture"], config["os"], config["created"]) == ("amd64", "linux", "2026-01-01T00:00:00Z")


def test_the_same_inputs_give_the_same_bytes_and_no_command_keeps_the_base_s():
    one = image_config(BASE, ["sha256:a"], {"b": "2", "a": "1"}, None)
    two = image_config(BASE, ["sha256:a"], {"a": "1", "b": "2"}, None)
    assert one == two and json.loads(one)["config"]["Cmd"] == ["bash"]


def test_the_daemon_holds_the_longest_common_prefix_of_any_image():
    ours = ["a", "b", "c", "d"]
    assert present_prefix(ours, [["a", "b", "x"], ["a", "b", "c", "y", "d"], ["b"]]) == 3
    assert present_prefix(ours, []) == 0


def test_the_archive_names_every_layer_and_carries_only_the_tars_given(tmp_path):
    tar_c = tmp_path / "c.tar"
    tar_c.write_bytes(b"layer c")
    config = b'{"x": 1}'
    diff_ids = ["sha256:" + "a" * 64, "sha256:" + "c" * 64]
    out = io.BytesIO()
    write_archive(out, "repo:tag", config, diff_ids, {diff_ids[1]: tar_c})
    out.seek(0)
    with tarfile.open(fileobj=out) as archive:
        names = archive.getnames()
        manifest = json.loads(archive.extractfile("manifest.json").read())
        assert archive.extractfile("c" * 64 + "/layer.tar").read() == b"layer c"
    config_name = hashlib.sha256(config).hexdigest() + ".json"
    assert manifest == [
        {"Config": config_name, "RepoTags": ["repo:tag"], "Layers": ["a" * 64 + "/layer.tar", "c" * 64 + "/layer.tar"]}
    ]
    assert sorted(names) == sorted([config_name, "c" * 64 + "/layer.tar", "manifest.json"])


def test_the_streamed_archive_is_every_byte_written_and_leaves_no_pipe_open():
    before = len(os.listdir("/proc/self/fd"))
    with streamed(lambda out: out.write(b"x" * (3 << 20) + b"end")) as chunks:
        assert b"".join(chunks) == b"x" * (3 << 20) + b"end"
    with streamed(lambda out: out.write(b"y" * (8 << 20))) as chunks:
        next(chunks)  # the daemon stopped reading: the writer ends on the closed pipe
    assert len(os.listdir("/proc/self/fd")) == before
    assert not [t for t in threading.enumerate() if t.name == "docker-load-archive"]


def test_a_failing_archive_is_raised_as_itself_not_as_the_senders_dropped_connection(tmp_path):
    missing = tmp_path / "gone.tar"

    def send(chunks):  # as the HTTP client does with a body that fails: a dropped connection
        try:
            for _ in chunks:
                pass
        except OSError as exc:
            raise ConnectionError("Connection aborted.") from exc

    with (
        pytest.raises(FileNotFoundError, match="gone.tar"),
        streamed(lambda out: out.write(missing.read_bytes())) as chunks,
    ):
        send(chunks)


class _Daemon:
    """A daemon's load as the Docker SDK's client sees it: it records what happened, in order."""

    def __init__(self, events: list[str], config: bytes, diff_ids: list[str]) -> None:
        self.events, self.image_id, self.diff_ids = events, "sha256:" + hashlib.sha256(config).hexdigest(), diff_ids
        self.api, self.images = self, self
        self.lost = 0

    def load_image(self, archive):
        self.events.append("load")
        for _ in archive:
            pass
        if self.events.count("load") <= self.lost:  # an image pruned meanwhile took a layer with it
            return iter([{"error": "open /var/lib/docker/tmp/x/layer.tar: no such file or directory"}])
        return iter([{"stream": "Loaded image"}])

    def get(self, tag):
        return type("Image", (), {"id": self.image_id, "attrs": {"RootFS": {"Layers": self.diff_ids}}})()


def assembled(tmp_path, monkeypatch, lost: int = 0) -> tuple[list[str], str, int, str]:
    """Layers a, b, c put together on a daemon that holds a and b and loses a layer `lost` times:
    what happened, in order, the image id and the tars sent, and the id the daemon gives."""
    monkeypatch.setattr("triton_release.image.assemble.remember_config", lambda _config: None)
    diff_ids = ["sha256:" + "a" * 64, "sha256:" + "b" * 64, "sha256:" + "c" * 64]
    config = image_config(BASE, diff_ids, {}, None)
    events: list[str] = []

    def tar_of(diff_id):
        events.append(f"tar {diff_id[7:8]}")
        (tmp_path / diff_id[7:]).write_bytes(b"layer")
        return tmp_path / diff_id[7:]

    daemon = _Daemon(events, config, diff_ids)
    daemon.lost = lost
    image_id, sent = assemble(
        daemon, "t:1", config, diff_ids, 1, tar_of, [diff_ids[:2]], lambda: events.append("sending")
    )
    return events, image_id, sent, daemon.image_id


def test_the_tars_to_send_are_written_and_told_of_before_the_daemon_reads_one(tmp_path, monkeypatch):
    """An upload started by `sending` goes up beside the daemon's own copy of the new layers."""
    events, image_id, sent, loaded = assembled(tmp_path, monkeypatch)
    assert (image_id, sent) == (loaded, 1)
    assert events == ["tar c", "sending", "load"]  # the held prefix a, b: only c's tar is written and sent


def test_a_layer_the_daemon_lost_is_written_and_told_of_again_before_the_archive_is_sent_again(tmp_path, monkeypatch):
    events, _, sent, _ = assembled(tmp_path, monkeypatch, lost=1)
    assert sent == 2 and events == ["tar c", "sending", "load", "tar b", "tar c", "sending", "load"]
