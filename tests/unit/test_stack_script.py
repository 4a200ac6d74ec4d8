"""`stack.py up`, run again while the stack is up but busy (as `make demo` does from inside a test
run), waits for the daemon and registry that hold the run's containers and images; it never
unlinks a live daemon's socket nor starts a second one beside it."""

from __future__ import annotations

import socket
import subprocess

import pytest

from stack import stack


@pytest.fixture
def silent_unix_listener(tmp_path):
    """A unix socket that accepts connections and never answers: a daemon too busy to reply."""
    path = tmp_path / "docker.sock"
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(path))
    server.listen(8)
    yield path
    server.close()


def no_new_processes(monkeypatch):
    started = []
    monkeypatch.setattr(subprocess, "Popen", lambda *a, **_kw: started.append(a) or pytest.fail(f"started {a}"))
    return started


def test_a_busy_daemon_is_waited_for_and_its_socket_kept(silent_unix_listener, tmp_path, monkeypatch):
    monkeypatch.setattr(stack, "DOCKER_SOCKET", silent_unix_listener)
    monkeypatch.setattr(stack, "STATE", tmp_path)
    monkeypatch.delenv("DOCKER_HOST", raising=False)
    answers = iter([False, False, False, True])  # slow for three probes, then it answers
    monkeypatch.setattr(stack, "docker_answers", lambda: next(answers))
    no_new_processes(monkeypatch)
    stack.ensure_docker()
    assert silent_unix_listener.exists()


def test_a_daemon_that_never_answers_fails_with_its_log_and_keeps_its_socket(
    silent_unix_listener, tmp_path, monkeypatch
):
    monkeypatch.setattr(stack, "DOCKER_SOCKET", silent_unix_listener)
    monkeypatch.setattr(stack, "STATE", tmp_path)
    monkeypatch.delenv("DOCKER_HOST", raising=False)
    (tmp_path / "dockerd.log").write_text('level=error msg="the daemon\'s own last words"\n')
    monkeypatch.setattr(stack, "docker_answers", lambda: False)
    monkeypatch.setattr(
        stack,
        "wait_for",
        lambda what, _probe, _seconds, log_file=None: (_ for _ in ()).throw(
            stack.StackError(f"{what} did not come up; {log_file.read_text()}")
        ),
    )
    no_new_processes(monkeypatch)
    with pytest.raises(stack.StackError, match="running, not answering.*last words"):
        stack.ensure_docker()
    assert silent_unix_listener.exists()


def test_a_stale_socket_nothing_listens_on_is_replaced(tmp_path):
    stale = tmp_path / "docker.sock"
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(stale))
    listener.close()  # the file stays, nothing accepts: a daemon that died
    assert stack.listening(stale) is False
    assert stack.listening(tmp_path / "absent.sock") is False


def test_a_bound_registry_port_is_waited_for_not_doubled(tmp_path, monkeypatch):
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    address = f"127.0.0.1:{server.getsockname()[1]}"
    monkeypatch.setattr(stack, "REGISTRY_ADDR", address)
    monkeypatch.setattr(stack, "STATE", tmp_path)
    answers = iter([False, True])
    monkeypatch.setattr(stack, "registry_answers", lambda: next(answers))
    no_new_processes(monkeypatch)
    try:
        stack.ensure_registry()
    finally:
        server.close()
    assert not (tmp_path / "registry.yml").exists()
