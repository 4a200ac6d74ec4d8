"""The container this process runs in, read from its mount table: only the sources of the files
Docker bind-mounts into each container of its own, never another container's path."""

from __future__ import annotations

from triton_release.server.container import own_container_ids

OURS = "a" * 64
OTHER = "b" * 64
DATA = "/var/lib/docker/containers"
MOUNTINFO = f"""\
612 590 0:52 / / rw,relatime master:1 - overlay overlay rw
633 612 0:58 / /dev/shm rw,nosuid - tmpfs shm rw,size=65536k
640 612 254:1 {DATA}/{OURS}/resolv.conf /etc/resolv.conf rw,relatime - ext4 /dev/vda rw
641 612 254:1 {DATA}/{OURS}/hostname /etc/hostname rw,relatime - ext4 /dev/vda rw
642 612 254:1 {DATA}/{OURS}/hosts /etc/hosts rw,relatime - ext4 /dev/vda rw
700 612 0:61 / {DATA}/{OTHER}/mounts/shm rw,nosuid - tmpfs shm rw,size=262144k
"""


def test_the_own_container_is_the_one_whose_hostname_and_hosts_files_are_mounted_here():
    assert own_container_ids(MOUNTINFO) == [OURS]


def test_another_containers_shm_in_the_table_is_never_taken_for_this_process():
    """A daemon in this mount namespace (the local stack) lists each running container's shm mount:
    a server joining one of them would live and die with another run's container."""
    assert own_container_ids(MOUNTINFO.replace(f"{DATA}/{OURS}/", "/etc/")) == []


class Daemon:
    """Containers looked up as the Docker daemon looks them up (`GET /containers/{ref}/json`): a full
    id, else a name, else a unique id prefix."""

    def __init__(self, *containers: tuple[str, str]) -> None:
        self.containers = self
        self.held = [Found(i, name) for i, name in containers]

    def get(self, ref: str):
        import docker

        for match in (lambda c: c.id == ref, lambda c: c.name == ref, lambda c: c.id.startswith(ref)):
            hits = [c for c in self.held if match(c)]
            if hits:
                return hits[0]
        raise docker.errors.NotFound(f"No such container: {ref}")


class Found:
    def __init__(self, id: str, name: str) -> None:
        self.id, self.name = id, name


def test_the_own_container_is_taken_from_the_hostname_mount_never_from_the_host_name(monkeypatch):
    """A runner whose host name is another container's name, or a prefix of its id: the daemon's
    lookup would answer with that container; the mount table's full id answers with ours."""
    import socket

    from triton_release.server.container import own_container

    for hostname in ("other-job", OTHER[:12]):
        monkeypatch.setattr(socket, "gethostname", lambda hostname=hostname: hostname)
        daemon = Daemon((OTHER, "other-job"), (OURS, "ours"))
        assert own_container(daemon, MOUNTINFO).id == OURS


def test_only_a_full_id_match_is_taken_for_the_own_container():
    """An id the daemon answers with another container (it matched a name or an id prefix) is no
    match: the server runs as on a host, never on another container's network."""
    from triton_release.server.container import own_container

    named_like_ours = Daemon((OTHER, OURS))  # a container *named* as our id, ours unknown to this daemon
    assert own_container(named_like_ours, MOUNTINFO) is None
    assert own_container(Daemon((OTHER, "x")), MOUNTINFO.replace(f"{DATA}/{OURS}/", "/etc/")) is None


def test_the_hostname_files_container_comes_before_the_hosts_files():
    other_hosts = MOUNTINFO.replace(f"{DATA}/{OURS}/hosts ", f"{DATA}/{OTHER}/hosts ").replace(
        f"{DATA}/{OURS}/resolv.conf ", f"{DATA}/{OTHER}/resolv.conf "
    )
    assert own_container_ids(other_hosts) == [OURS, OTHER]
