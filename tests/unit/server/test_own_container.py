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
