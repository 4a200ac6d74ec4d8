"""The stub decision and the base-image probe's parsing, on recorded probe output (no Docker)."""

from __future__ import annotations

import pytest

from triton_release.errors import InfrastructureError, Refused, UsageError
from triton_release.image import requirements, stub
from triton_release.image.base import parse_ldd, parse_probe
from triton_release.image.compiler import builder_stage
from triton_release.image.sources import Source, wanted

LDD_311 = """\
\tlinux-vdso.so.1 (0x00007ffc)
\tlibpython3.11.so.1.0 => /lib/x86_64-linux-gnu/libpython3.11.so.1.0 (0x00007f1)
\tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007f2)
"""
LDD_38_MISSING = "\tlibpython3.8.so.1.0 => not found\n\tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x1)\n"
LDD_WHEEL_313 = "\tlibpython3-419a3a08.13.so.1.0 => /opt/tritonserver/lib/libpython3-419a3a08.13.so.1.0 (0x1)\n"


def probe_output(
    python3="3.11",
    libpython="/usr/lib/x86_64-linux-gnu/libpython3.11.so.1.0",
    numpy="1.24.2",
    ldd=LDD_311,
    triton="2.51.0",
    ngc="24.10",
) -> str:
    import json

    python = {
        "version": python3,
        "executable": f"/usr/bin/python{python3}",
        "soname": f"libpython{python3}.so.1.0",
        "libpython": libpython,
        "site_packages": f"/usr/local/lib/python{python3}/dist-packages",
        "numpy": numpy,
    }
    return "\n".join(
        [
            json.dumps({"env": {"triton": triton, "ngc": ngc}}),
            json.dumps({"python3": python3}),
            json.dumps({"glibc": "2.36"}),
            json.dumps({"python": python}),
            '{"ldd": "begin"}',
            ldd,
        ]
    )


def base(**kw):
    return parse_probe("tritonserver:test", "sha256:abc", probe_output(**kw))


def test_probe_output_is_parsed():
    found = base()
    assert (found.triton_version, found.ngc_release, found.python3, found.glibc) == ("2.51.0", "24.10", "3.11", "2.36")
    assert found.pythons["3.11"].site_packages == "/usr/local/lib/python3.11/dist-packages"
    assert found.stub.python == "3.11" and found.stub.loads


def test_the_ngc_release_is_what_the_image_says_never_a_table():
    """An image that does not say its NGC release has none: no table fills it from the Triton
    version; the source stub is then refused, naming the variable and how to set it."""
    found = base(ngc="", triton="2.52.0")
    assert found.ngc_release == "" and found.release.branch == ""
    with pytest.raises(
        Refused, match=r"does not say its NGC release \(NVIDIA_TRITON_SERVER_VERSION=<YY.MM>"
    ) as refused:
        stub.choose(found, None, "source")
    assert "ENV NVIDIA_TRITON_SERVER_VERSION=<YY.MM>" in str(refused.value)


@pytest.mark.parametrize(
    ("ldd", "python", "loads", "missing"),
    [
        (LDD_311, "3.11", True, ()),
        (LDD_38_MISSING, "3.8", False, ("libpython3.8.so.1.0",)),
        (LDD_WHEEL_313, "3.13", True, ()),
    ],
)
def test_ldd_is_parsed(ldd, python, loads, missing):
    links = parse_ldd(ldd)
    assert (links.python, links.loads, links.missing) == (python, loads, missing)


def test_a_matching_stub_is_kept():
    choice = stub.choose(base(), None, "auto")
    assert choice.kept and choice.provider == "stock" and choice.stub_file is None
    assert choice.summary() == "stub: kept the stock stub (Python 3.11, Triton 2.51.0)"


def test_the_built_image_s_stub_is_probed_only_when_the_build_put_one_there(monkeypatch):
    """The stock stub kept was found by the base's own ldd: no container runs ldd again. A stub
    the build wrote is probed in the built image, and one that does not link the target refuses."""
    probed: list[str] = []

    def check_stub(client, tag):
        probed.append(tag)
        return parse_ldd(LDD_38_MISSING)

    monkeypatch.setattr(stub, "check_stub", check_stub)
    found = base()
    kept = stub.choose(found, None, "auto")
    stub.check_built(None, "models:kept", kept, found.pythons["3.11"])
    assert probed == []

    class Images:
        def remove(self, tag, force):
            pass

    class Client:
        images = Images()

    replaced = stub.StubChoice(**{**kept.__dict__, "kept": False, "provider": "wheel"})
    with pytest.raises(Refused, match="cannot find libpython3.8.so.1.0"):
        stub.check_built(Client(), "models:wheel", replaced, found.pythons["3.11"])
    assert probed == ["models:wheel"]


def test_stock_refuses_a_mismatch_naming_both_pythons():
    with pytest.raises(Refused, match=r"links libpython3.8.so.1.0 \(Python 3.8\), but the models run on Python 3.11"):
        stub.choose(base(ldd=LDD_38_MISSING), None, "stock")


def test_a_python_the_image_lacks_is_refused_with_what_to_do():
    with pytest.raises(Refused, match=r"no Python 3.12 \(it has: 3.11\).*--python 3.11.*EXECUTION_ENV_PATH"):
        stub.choose(base(), "3.12", "auto")


def test_a_missing_libpython_is_refused_naming_the_package():
    with pytest.raises(Refused, match="apt-get install libpython3.11"):
        stub.choose(base(libpython=""), None, "auto")


def test_a_base_without_the_python_backend_is_refused():
    with pytest.raises(Refused, match="no Python backend stub"):
        stub.choose(base(ldd="no stub at /opt/tritonserver/backends/python/triton_python_backend_stub"), None, "auto")


def test_an_unknown_stub_mode_is_a_usage_error():
    with pytest.raises(UsageError, match="auto, stock, wheel, source or path:FILE"):
        stub.choose(base(), None, "conda")


def unreachable(base, python, stub_sources=""):
    raise stub.NoProvider(
        f"building python_backend r{base.ngc_release} needs its sources from GitHub, and it is unreachable",
        unreachable=True,
    )


def test_an_unknown_triton_version_falls_to_source_and_explains_both(monkeypatch):
    monkeypatch.setattr(stub, "source_build", unreachable)
    with pytest.raises(InfrastructureError, match="no nvidia-pytriton wheel is known to carry Triton 2.62.0") as failed:
        stub.choose(base(ldd=LDD_38_MISSING, triton="2.62.0", ngc="25.10"), None, "auto")
    message = str(failed.value)
    assert "no nvidia-pytriton wheel is known to carry Triton 2.62.0" in message
    assert "unreachable" in message and "--stub path:FILE" in message and "--stub-sources" in message
    assert failed.value.exit_code == 3


def sources(release="24.10"):
    return tuple(
        Source(name, f"file:///mirrors/{name}.git", ref, f"{index:040x}")
        for index, (name, ref) in enumerate(wanted(f"r{release}").items(), 1)
    )


def test_the_source_stage_builds_the_matching_branch_for_the_target_python():
    stage = builder_stage("nvcr.io/nvidia/tritonserver:24.10-py3", "3.12", sources(), "upstream")
    assert stage.startswith("FROM nvcr.io/nvidia/tritonserver:24.10-py3 AS stub-builder")
    assert "git clone -q -b r24.10 /sources/python_backend.git /src/python_backend" in stage
    assert "-DTRITON_REPO_ORGANIZATION=file:///sources" in stage
    for repo in ("BACKEND", "COMMON", "CORE"):
        assert f"-DTRITON_{repo}_REPO_TAG=r24.10" in stage
    assert "python3.12-dev" in stage and "make -C /build" in stage and "triton-python-backend-stub" in stage
    assert "github.com" not in stage and "libboost-dev" not in stage  # Boost: python_backend's own download
    system = builder_stage("local/tritonserver:24.10-py3-trixie", "3.13", sources(), "system")
    assert (
        "libboost-dev" in system and "-DCMAKE_PROJECT_tritonpythonbackend_INCLUDE=/sources/system-boost.cmake" in system
    )
    assert "-DPYTHON_EXECUTABLE=/usr/bin/python3.13" in system


def test_numpy_2_on_an_old_stub_is_refused_before_any_build(monkeypatch):
    monkeypatch.setattr(stub, "source_build", unreachable)
    with pytest.raises(Refused) as refused:
        stub.choose(base(numpy="2.2.4"), None, "auto")
    message = str(refused.value)
    assert "numpy 2.2.4" in message and "pybind11 older than 2.12" in message and "--stub source" in message
    assert "numpy<2" in message and "Triton 2.52" in message and "--stub-sources" in message
    assert "auto tried: stock and wheel: numpy 2.2.4 breaks NVIDIA's stubs of Triton 2.51.0" in message
    stub.choose(base(numpy="1.24.2"), None, "auto")
    stub.choose(base(numpy="2.2.4", triton="2.62.0", ngc="25.10"), None, "auto")


def test_the_source_stub_is_compiled_against_a_pybind11_that_handles_numpy_2():
    stage = builder_stage("nvcr.io/nvidia/tritonserver:24.10-py3", "3.11", sources(), "upstream")
    assert "git clone -q -b v2.13.6 /sources/pybind11.git /src/pybind11" in stage
    assert "-DFETCHCONTENT_SOURCE_DIR_PYBIND11=/src/pybind11" in stage
    choice = stub.StubChoice("source", "2.51.0", "24.10", "3.11", "3.11", "3.11", False, "source", "r24.10")
    stub.refuse_numpy2(choice, "2.2.4", "x", "y")  # no refusal


def test_platforms_follow_the_images_glibc():
    tags = requirements.platforms("2.36")
    assert tags[0] == "manylinux_2_36_x86_64" and "manylinux2014_x86_64" in tags


def test_the_base_backends_are_read_and_a_model_whose_backend_is_missing_is_refused(make_repo, tmp_path):
    from support.models import python_model_files, write_tree
    from triton_release.errors import Refused
    from triton_release.image.base import BaseImage, require_backends
    from triton_release.models.repository import Repository

    output = probe_output().replace('{"ldd": "begin"}', '{"backends": "python "}\n{"ldd": "begin"}')
    found = parse_probe("tritonserver:test", "sha256:abc", output)
    assert found.backends == ("python",)
    assert BaseImage.from_json(found.to_json()).backends == ("python",)  # kept in the inspection cache
    onnx = 'name: "scorer"\nplatform: "onnxruntime_onnx"\nmax_batch_size: 0\n'
    brings = 'name: "own"\nbackend: "custom"\nmax_batch_size: 0\n'
    root = make_repo(
        {
            **python_model_files("m"),
            "scorer/config.pbtxt": onnx,
            "scorer/1/model.onnx": "",
            "own/config.pbtxt": brings,
            "own/1/libtriton_custom.so": "",  # a backend of its own, which Triton looks for there first
        }
    )
    with pytest.raises(Refused) as refused:
        require_backends(found, Repository.load(root))
    message = refused.value.message
    assert "scorer needs the onnxruntime backend" in message and "holds only python" in message, message
    assert "own needs" not in message
    require_backends(found, Repository.load(write_tree(tmp_path / "python", python_model_files("m"))))  # fine
    require_backends(base(), Repository.load(root))  # a base whose backends folder is not told: not refused
