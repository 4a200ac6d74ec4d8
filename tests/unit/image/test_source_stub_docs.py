"""What docs/image.md's "The source stub" section claims, checked against the code: the sources and
their refs, the cache key, the estimate, the releases each provider covers, the mirror recipe for
an air-gapped runner and its settings file."""

from __future__ import annotations

import re

import yaml

from support.docs import yaml_blocks
from support.stack import ROOT
from triton_release.image import compiler, ngc, sources, stub
from triton_release.settings import resolve

PAGE = ROOT / "docs" / "image.md"
TEXT = PAGE.read_text(encoding="utf-8")
SECTION = TEXT.split("## The source stub", 1)[1]


def table_after(marker: str) -> list[list[str]]:
    table = SECTION.split(marker, 1)[1].strip().split("\n\n", 1)[0]
    return [[cell.strip() for cell in line.strip().strip("|").split("|")] for line in table.splitlines()[2:]]


def test_the_sources_table_is_what_the_stub_is_compiled_from():
    rows = table_after("Boost as below.")
    expected = [
        [name, ref.replace("{branch}", "r<YY.MM>"), f"{sources.GITHUB}/{repo}"]
        for name, (repo, ref) in sources.UPSTREAM.items()
    ]
    assert rows == expected
    assert "pybind11 is 2.13.6" in SECTION and sources.UPSTREAM["pybind11"][1] == "v2.13.6"


def test_the_cache_key_named_is_the_one_computed():
    sentence = SECTION.split("keyed by what determines it:", 1)[1].split("A release with", 1)[0]
    named = re.findall(r"`(\w+)`", sentence)
    build = compiler.StubBuild(
        "base",
        "sha256:abc",
        "24.10",
        "3.13",
        sources.Origin("/mirrors"),
        tuple(sources.Source(n, "u", r.format(branch="r24.10"), "0" * 40) for n, (_, r) in sources.UPSTREAM.items()),
    )
    assert set(named) == set(build.inputs)
    assert f"takes {compiler.ESTIMATE}" in SECTION
    choice = stub.StubChoice("source", "2.51.0", "24.10", "3.13", "3.13", "3.11", False, "source", "x", build=build)
    assert {"from", "cache_key", "sources", "compiled"} <= set(choice.to_json()["source"])


def test_the_wheel_row_lists_the_triton_versions_the_code_knows():
    rows = {row[0]: row[1] for row in table_after("**Which releases each provider covers.**")}
    assert set(rows) == {"stock", "wheel", "source"}
    assert re.findall(r"\d+\.\d+\.\d+", rows["wheel"]) == list(stub.PYTRITON_WHEELS)
    assert "proven here on Triton 2.51" in rows["source"]
    assert f"from r{ngc.NEW_CMAKE_FROM} on" in rows["source"] and f"`{compiler.CMAKE_REQUIREMENT}`" in rows["source"]


def test_the_air_gapped_recipe_mirrors_every_source_under_the_name_looked_for(tmp_path):
    block = SECTION.split("**For an air-gapped runner**", 1)[1].split("```\n", 2)[1]
    clones = re.findall(r"git clone --mirror (\S+) (\S+)", block)
    assert {name: url for url, name in clones} == {
        f"{name}.git": f"{sources.GITHUB}/{repo}" for name, (repo, _) in sources.UPSTREAM.items()
    }
    [settings_block] = [b for b in yaml_blocks(PAGE) if "stub_sources" in b.text]
    config = tmp_path / "repo" / "triton-release.yaml"
    config.parent.mkdir()
    config.write_text(settings_block.text)
    settings = resolve({}, str(config), cwd=tmp_path)
    assert settings.image.stub == "source"
    assert settings.image.stub_sources == str(tmp_path / "repo" / yaml.safe_load(settings_block.text)["stub_sources"])
