"""Two releases racing for the same X.Y.Z from two machines. A registry has no conditional PUT,
so both manifest PUTs succeed and the last one wins; `push` reads X.Y.Z back after the daemon's
push and refuses unless it is the manifest this push wrote. A loopback proxy in front of the real
registry (127.0.0.1:5000) holds the X.Y.Z manifest PUTs so that the race is lost every time."""

from __future__ import annotations

import io
import tarfile
import threading

import docker
import pytest

from support.registries import RegistryProxy
from support.stack import REGISTRY
from triton_release.contract import is_ledger_tag
from triton_release.registry.client import RegistryRepository
from triton_release.registry.ledger import read_ledger
from triton_release.registry.publish import LostRace, PushResult, push, tag_release

pytestmark = [pytest.mark.integration, pytest.mark.serial, pytest.mark.timeout(600)]


@pytest.fixture
def two_images(docker_client, unique, image_tags):
    """Two small images, each one file on scratch: the two machines' builds of the same release."""
    tags = []
    for side in ("ours", "theirs"):
        tag = f"triton-release-test/race:{unique}-{side}"
        context = io.BytesIO()
        with tarfile.open(fileobj=context, mode="w") as tar:
            for name, data in (
                ("Dockerfile", f"FROM scratch\nCOPY side /side\nLABEL side={side}-{unique}\n"),
                ("side", f"{side} {unique}\n"),
            ):
                info = tarfile.TarInfo(name)
                info.size = len(data.encode())
                tar.addfile(info, io.BytesIO(data.encode()))
        context.seek(0)
        docker_client.images.build(fileobj=context, custom_context=True, tag=tag, rm=True, pull=False)
        image_tags.append(tag)
        tags.append(tag)
    return tags


def test_two_releases_racing_for_one_version_make_one_winner(docker_client, two_images, unique, image_tags):
    """Both machines' pushes reach the manifest PUT of 1.1.0 before either is answered (a slow PUT):
    both PUTs succeed, one of them last. Only that one's release may go on to move tags."""
    arrived, written = threading.Barrier(2, timeout=120), threading.Barrier(2, timeout=120)

    def slow_put(proxy, path, forward):
        arrived.wait()  # both pushes are at their manifest PUT
        answer = forward()
        written.wait()  # both PUTs are in the registry before either push hears back
        return answer

    name = f"triton-release-faults/race-{unique}"
    outcomes: dict[str, object] = {}

    def release(image: str, proxy: RegistryProxy) -> None:  # one machine: its own daemon connection and client
        client = docker.from_env(timeout=600)
        repo = RegistryRepository.parse(f"{proxy.address}/{name}")
        try:
            outcomes[image] = push(image, repo, "1.1.0", client=client)
            tag_release(repo, "1.1.0", None, "latest")  # what `release` does once push returns
        except Exception as exc:  # noqa: BLE001 - the outcome is what the test checks
            outcomes[image] = exc
        finally:
            client.close()

    # one proxy per machine: on one daemon, the two local `HOST/NAME:1.1.0` tags must differ
    with RegistryProxy("1.1.0", slow_put) as first, RegistryProxy("1.1.0", slow_put) as second:
        image_tags += [f"{first.address}/{name}:1.1.0", f"{second.address}/{name}:1.1.0"]
        machines = [threading.Thread(target=release, args=pair) for pair in zip(two_images, (first, second))]
        for machine in machines:
            machine.start()
        for machine in machines:
            machine.join(300)
    assert not any(m.is_alive() for m in machines)

    won = [o for o in outcomes.values() if isinstance(o, PushResult)]
    lost = [o for o in outcomes.values() if isinstance(o, LostRace)]
    assert len(won) == 1 and len(lost) == 1, outcomes
    registry = RegistryRepository.parse(f"{REGISTRY}/{name}")
    assert registry.digest("1.1.0") == won[0].digest
    assert f"is {won[0].digest}, not sha256:" in str(lost[0]) and "another release won the race" in str(lost[0])
    assert lost[0].exit_code == 1 and lost[0].already_released  # the loser's bump is undone by `release`
    assert [t for t in registry.tags() if not is_ledger_tag(t)] == ["1", "1.1", "1.1.0", "latest"]
    assert {registry.digest(t) for t in ("1", "1.1", "latest")} == {won[0].digest}  # the loser moved nothing


def test_a_rival_write_between_our_put_and_our_read_back_is_refused(docker_client, two_images, unique, image_tags):
    """Ours lands, then another machine's PUT of the same version, then our read-back."""
    name = f"triton-release-faults/swap-{unique}"
    direct = RegistryRepository.parse(f"{REGISTRY}/{name}")
    rival_image = docker_client.images.get(two_images[1])
    rival_image.tag(f"{REGISTRY}/{name}", "rival")
    image_tags.append(f"{REGISTRY}/{name}:rival")
    for _ in docker_client.api.push(f"{REGISTRY}/{name}", tag="rival", stream=True, decode=True):
        pass
    rival = direct.manifest("rival")

    def then_theirs(proxy, path, forward):
        answer = forward()
        direct.put_manifest("1.0.0", rival)  # the other machine's write lands just after ours
        return answer

    with RegistryProxy("1.0.0", then_theirs) as proxy:
        repo = RegistryRepository.parse(f"{proxy.address}/{name}")
        image_tags.append(f"{proxy.address}/{name}:1.0.0")
        with pytest.raises(
            LostRace,
            match=rf"is {rival.digest}, not sha256:[0-9a-f]{{64}} that this release pushed: "
            r"another release won the race for 1.0.0, and no other tag was moved",
        ):
            push(two_images[0], repo, "1.0.0", client=docker_client)
    assert direct.digest("1.0.0") == rival.digest and [t for t in direct.tags() if not is_ledger_tag(t)] == [
        "1.0.0",
        "rival",
    ]
    assert "1.0.0" not in read_ledger(direct).releases  # entered before the put, lost the race: never issued
