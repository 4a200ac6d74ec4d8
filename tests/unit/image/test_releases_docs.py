"""What docs/image.md's "Triton releases: proven here and planned" claims, checked against the code:
where a release is read from, the refusal of an image that does not say it, doctor's plan before
a pull (its line, the 1 MiB cap), each row's plan (the branch, CMake), the proven row's stand-ins
and the tests that prove them, and the default base it names."""

from __future__ import annotations

import re

import pytest
from test_ngc import current_base

from support.stack import ROOT
from triton_release import cache
from triton_release.errors import Refused
from triton_release.image import ngc, stub
from triton_release.image.sources import Source, wanted
from triton_release.registry import sizes
from triton_release.settings.table import SETTINGS

PAGE = ROOT / "docs" / "image.md"
SECTION = PAGE.read_text(encoding="utf-8").split("## Triton releases: proven here and planned", 1)[1]
DEFAULT_BASE = next(s.default for s in SETTINGS if s.key == "base_image")


def rows() -> list[list[str]]:
    table = SECTION.split("| NGC release |", 1)[1].split("\n\n", 1)[0]
    return [[cell.strip() for cell in line.strip().strip("|").split("|")] for line in table.splitlines()[2:]]


def test_the_release_is_read_where_the_page_says():
    for name in (ngc.NGC_VARIABLE, ngc.TRITON_VARIABLE, ngc.TRITON_LABEL):
        assert f"`{name}`" in SECTION
    assert ngc.from_config({}, {ngc.TRITON_LABEL: "2.71.0"}).triton == "2.71.0"
    found = current_base(os_line="ubuntu 24.04")
    assert found.os == "ubuntu 24.04"  # from /etc/os-release, as the probe prints it


def test_an_image_that_does_not_say_its_release_is_refused_as_the_page_says():
    unsaid = current_base(ngc_release="", triton="")
    with pytest.raises(Refused) as refused:
        stub.choose(unsaid, None, "source")
    message = " ".join(str(refused.value).split())
    assert refused.value.exit_code == 1
    assert (
        "nvcr.io/nvidia/tritonserver:<YY.MM>-py3" in message and "ENV NVIDIA_TRITON_SERVER_VERSION=<YY.MM>" in message
    )
    assert "ENV NVIDIA_TRITON_SERVER_VERSION=<YY.MM>" in SECTION
    # numpy 2 and NVIDIA's stub of an unsaid Triton: treated as the old ones
    choice = stub.StubChoice("auto", "", "", "3.12", "3.12", "3.12", True, "stock", "x")
    assert stub.old_pybind11(choice) and "does not say its Triton version are treated as the old ones" in SECTION


def test_doctors_line_before_a_pull_is_the_one_printed():
    assert "at most 1 MiB" in SECTION and sizes.CONFIG_LIMIT == 1 << 20
    [line] = [line for line in SECTION.splitlines() if line.startswith("stub plan  ok  ")]
    plan = stub.before_pull(ngc.Release("26.07", "2.71.0", "ubuntu 24.04"), DEFAULT_BASE, "3.11", "auto")
    assert line == f"stub plan  ok  {plan}"
    assert (
        DEFAULT_BASE == "nvcr.io/nvidia/tritonserver:26.07-py3" and "26.07 (Triton 2.71.0, the default base)" in SECTION
    )


@pytest.mark.parametrize("release", ["24.11", "24.12", "25.01", "26.07"])
def test_each_planned_row_is_the_plan_made(release, monkeypatch, tmp_path):
    """For a base of that release with its stub on Python 3.12 and the models on 3.11: the stock
    stub for 3.12, a source stub from its own branch for 3.11, CMake from PyPI where the row says."""
    cache.configure({"TRITON_RELEASE_CACHE": str(tmp_path / "cache")})

    def resolved(origin, branch):
        return tuple(Source(n, "u", r, f"{i:040x}") for i, (n, r) in enumerate(wanted(branch).items(), 1))

    monkeypatch.setattr(stub, "resolve", resolved)
    [row] = [r for r in rows() if r[0].startswith("24.11" if release < "25.01" else "25.01")]
    found = current_base(pythons=("3.12", "3.11"), ngc_release=release, triton="2.99.0")
    assert stub.choose(found, None, "auto").kept and "Python 3.12" in row[1]
    choice = stub.choose(found, "3.11", "auto")
    assert choice.provider == "source" and choice.build.branch == f"r{release}" and "source from r<YY.MM>" in row[2]
    cmake = "CMake 3.31.8 or newer from PyPI" in choice.summary()
    assert cmake == ngc.needs_new_cmake(release) == ("CMake 3.31.8 or newer from PyPI" in row[2])
    assert ("/sources/cmake.whl" in choice.build.stage()) == cmake
    assert row[3] == "planned, not run here"


def test_the_proven_row_names_the_stand_ins_and_the_tests_that_prove_it():
    [proven] = [r for r in rows() if r[3].startswith("proven end to end")]
    assert proven[0] == "24.10 (Triton 2.51.0)" and f"nvidia-pytriton {stub.PYTRITON_WHEELS['2.51.0']}" in proven[2]
    dockerfile = (ROOT / "stack" / "tritonserver.Dockerfile").read_text()
    assert "TRITON_SERVER_VERSION=2.51.0" in dockerfile and "NVIDIA_TRITON_SERVER_VERSION=24.10" in dockerfile
    stand_ins = re.findall(r"`(local/tritonserver:24\.10-py3)`|`(-\w+)`", proven[3])
    names = {a or f"local/tritonserver:24.10-py3{b}" for a, b in stand_ins}
    stack = (ROOT / "stack" / "stack.py").read_text()
    assert names == {
        "local/tritonserver:24.10-py3",
        "local/tritonserver:24.10-py3-stub38",
        "local/tritonserver:24.10-py3-trixie",
    }
    assert all(f'StandIn("{name}"' in stack for name in names)
    served = (ROOT / "tests" / "integration" / "test_source_stub_served.py").read_text()
    assert 'TRIXIE = "local/tritonserver:24.10-py3-trixie"' in served
    assert "def test_every_golden_case_passes_through_it_on_python_313_with_numpy_2" in served
    wheel = (ROOT / "tests" / "integration" / "test_stub_image.py").read_text()
    assert "def test_stub38_base_gets_the_311_stub_and_the_model_loads" in wheel


def test_the_readme_names_the_default_base_and_links_here():
    readme = (ROOT / "README.md").read_text()
    assert f"The base image is `{DEFAULT_BASE}`" in readme
    assert "(docs/image.md#triton-releases-proven-here-and-planned)" in readme
    # what it says of the default base is what the page's row says
    [row] = [r for r in rows() if "the default base" in r[0]]
    assert "(Triton 2.71.0, Python 3.12)" in readme and "Triton 2.71.0" in row[0] and "Python 3.12" in row[1]
