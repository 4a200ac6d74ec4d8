"""What a base image says of its Triton release (image/ngc.py), read from its probe or from its
image configuration, never from a table; the plan made from it before a pull; and the guards on
what reaches a shell or a stub (no Docker, no network)."""

from __future__ import annotations

import base64
import hashlib
import json
import zipfile

import pytest

from triton_release import cache
from triton_release.errors import Refused
from triton_release.image import ngc, stub
from triton_release.image.base import BaseImage, parse_probe
from triton_release.image.compiler import ESTIMATE, StubBuild
from triton_release.image.sources import Origin

LDD_312 = "\tlibpython3.12.so.1.0 => /lib/x86_64-linux-gnu/libpython3.12.so.1.0 (0x1)\n"


def current_base(pythons=("3.12",), ngc_release="26.07", triton="2.71.0", os_line="ubuntu 24.04") -> BaseImage:
    """A probe of an NGC 26.07 image as the probe prints it: Ubuntu 24.04, python3 3.12 and its stub."""
    lines = [
        json.dumps({"env": {"triton": triton, "ngc": ngc_release}}),
        json.dumps({"python3": pythons[0]}),
        json.dumps({"os": os_line}),
        json.dumps({"glibc": "2.39"}),
    ]
    for version in pythons:
        python = {
            "version": version,
            "executable": f"/usr/bin/python{version}",
            "soname": f"libpython{version}.so.1.0",
            "libpython": f"/usr/lib/x86_64-linux-gnu/libpython{version}.so.1.0",
            "site_packages": f"/usr/local/lib/python{version}/dist-packages",
            "numpy": "",
        }
        lines.append(json.dumps({"python": python}))
    return parse_probe(
        "nvcr.io/nvidia/tritonserver:26.07-py3", "sha256:abc", "\n".join([*lines, '{"ldd": "begin"}', LDD_312])
    )


def test_the_probe_reads_the_release_and_the_os_from_the_image():
    found = current_base()
    assert (found.triton_version, found.ngc_release, found.os, found.python3) == (
        "2.71.0",
        "26.07",
        "ubuntu 24.04",
        "3.12",
    )
    assert found.release.branch == "r26.07" and found.release.needs_new_cmake
    assert BaseImage.from_json(found.to_json()).release == found.release  # the cache keeps the OS


@pytest.mark.parametrize(
    ("env", "labels", "expected"),
    [
        ({"NVIDIA_TRITON_SERVER_VERSION": "26.07", "TRITON_SERVER_VERSION": "2.71.0"}, {}, ("26.07", "2.71.0", "")),
        # Triton's own label, and Ubuntu's labels for the OS
        (
            {"NVIDIA_TRITON_SERVER_VERSION": "24.11"},
            {
                "com.nvidia.tritonserver.version": "2.52.0",
                "org.opencontainers.image.ref.name": "ubuntu",
                "org.opencontainers.image.version": "24.04",
            },
            ("24.11", "2.52.0", "ubuntu 24.04"),
        ),
        # another shape is not a release: never a branch name, a Dockerfile word or a path
        ({"NVIDIA_TRITON_SERVER_VERSION": "24.10; rm -rf /", "TRITON_SERVER_VERSION": "2.51.0-dev"}, {}, ("", "", "")),
        ({}, {}, ("", "", "")),
    ],
)
def test_the_release_is_read_from_the_environment_and_labels(env, labels, expected):
    found = ngc.from_config(env, labels)
    assert (found.ngc, found.triton, found.os) == expected


def test_an_image_configurations_env_list_is_read():
    assert ngc.environment(["PATH=/a:/b", "NVIDIA_TRITON_SERVER_VERSION=26.07", "BROKEN", 3]) == {
        "PATH": "/a:/b",
        "NVIDIA_TRITON_SERVER_VERSION": "26.07",
    }


def test_cmake_3_31_8_is_needed_from_r25_on():
    assert not ngc.needs_new_cmake("24.12") and ngc.needs_new_cmake("25.01") and ngc.needs_new_cmake("26.07")
    assert not ngc.needs_new_cmake("") and not ngc.needs_new_cmake("2x.01")


@pytest.mark.parametrize(
    "field",
    [{"triton_version": "2.71"}, {"ngc_release": "26.7"}, {"python3": "3.12; id"}, {"os": "Ubuntu 24.04 LTS"}],
)
def test_a_base_image_of_another_shape_is_refused_when_made(field):
    good = current_base()
    fields = {**good.__dict__, **field}
    with pytest.raises(ValueError, match="is not"):
        BaseImage(**fields)


def test_a_stub_build_of_another_shape_is_refused_before_any_stage_is_written():
    with pytest.raises(ValueError, match="is not YY.MM"):
        StubBuild("b", "sha256:abc", "26.07 && curl x", "3.12", Origin(), ())
    with pytest.raises(ValueError, match="is not X.Y"):
        StubBuild("b", "sha256:abc", "26.07", "3.12$(id)", Origin(), ())


def test_before_the_pull_a_current_release_plans_its_source_stub():
    release = ngc.Release("26.07", "2.71.0", "ubuntu 24.04")
    plan = stub.before_pull(release, "nvcr.io/nvidia/tritonserver:26.07-py3", "3.11", "auto")
    assert plan == (
        "Triton 2.71.0 (NGC 26.07, ubuntu 24.04); its Pythons and stub are read after the pull; stub: the stock "
        "stub if it links Python 3.11, else a source stub from python_backend r26.07 for Python 3.11 "
        f"({ESTIMATE}, once, CMake 3.31.8 or newer from PyPI)"
    )
    older = stub.before_pull(ngc.Release("24.10", "2.51.0"), "x", None, "auto")
    assert "else nvidia-pytriton 0.7.0's stub, else a source stub from python_backend r24.10" in older
    assert "CMake" not in older


def test_before_the_pull_an_image_that_does_not_say_its_release_gets_no_source_plan():
    unsaid = ngc.Release()
    plan = stub.before_pull(unsaid, "example.com/triton:custom", None, "auto")
    assert "Triton unknown (NGC release not said)" in plan and "no source stub (" in plan
    with pytest.raises(Refused, match="--stub source: example.com/triton:custom does not say its NGC release"):
        stub.before_pull(unsaid, "example.com/triton:custom", None, "source")
    with pytest.raises(Refused, match="no nvidia-pytriton wheel is known to carry Triton 2.71.0"):
        stub.before_pull(ngc.Release("26.07", "2.71.0"), "x", None, "wheel")


def test_numpy_2_fails_closed_on_nvidias_stubs_when_the_triton_version_is_not_said():
    said = stub.StubChoice("auto", "2.52.0", "24.11", "3.12", "3.12", "3.12", True, "stock", "x")
    assert not stub.old_pybind11(said)
    assert stub.old_pybind11(stub.StubChoice("auto", "2.51.0", "24.10", "3.12", "3.12", "3.12", True, "stock", "x"))
    unsaid = stub.StubChoice("auto", "", "", "3.12", "3.12", "3.12", True, "stock", "x")
    assert stub.old_pybind11(unsaid)
    with pytest.raises(Refused, match="numpy 2.2.4"):
        stub.refuse_numpy2(unsaid, "2.2.4", "the image", "numpy<2")


def fake_wheel(folder, stub_bytes: bytes, recorded: bytes) -> None:
    member = "pytriton/tritonserver/python_backend_stubs/3.11/triton_python_backend_stub"
    digest = base64.urlsafe_b64encode(hashlib.sha256(recorded).digest()).rstrip(b"=").decode()
    with zipfile.ZipFile(folder / "nvidia_pytriton-0.7.0-py3-none-manylinux_2_35_x86_64.whl", "w") as wheel:
        wheel.writestr(member, stub_bytes)
        wheel.writestr("nvidia_pytriton-0.7.0.dist-info/RECORD", f"{member},sha256={digest},{len(recorded)}\n")


def test_the_wheels_stub_is_checked_against_its_record(tmp_path):
    cache.configure({"TRITON_RELEASE_CACHE": str(tmp_path / "cache")})
    wheels = tmp_path / "cache" / "wheels"
    wheels.mkdir(parents=True)
    fake_wheel(wheels, b"a changed stub", b"the stub NVIDIA built")
    with pytest.raises(Refused, match="does not match the sha256 its RECORD gives") as refused:
        stub.wheel_stub("2.51.0", "3.11")
    assert "removed from the cache" in str(refused.value)
    assert not list(wheels.glob("*.whl"))  # downloaded again next time
    fake_wheel(wheels, b"the stub NVIDIA built", b"the stub NVIDIA built")
    path, origin = stub.wheel_stub("2.51.0", "3.11")
    assert path.read_bytes() == b"the stub NVIDIA built" and origin == "nvidia-pytriton 0.7.0"
