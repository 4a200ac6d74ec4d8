"""What docs/registries.md says about names and credentials, checked against the code: its name
table against the resolution, its list of credential sources against the sources the lookup
reports (produced by helper scripts and a Docker config in tmp_path), each registry's Docker
config and shell snippets, Docker Hub's refusal and 429, and the write-once fix it points to.
(Its yaml blocks are also checked by test_docs_claims.py, as every page's are.)"""

from __future__ import annotations

import json
import os
import re
import shlex

import pytest
import requests
import yaml

from support.credential_helpers import write_docker_config, write_helper
from support.docs import yaml_blocks
from support.registries import FakeRegistry
from support.stack import ROOT
from triton_release.contract import lower_cased, parse_repository
from triton_release.errors import InfrastructureError, UsageError
from triton_release.registry.client import RegistryRepository, open_repository
from triton_release.registry.credentials import ENV_NAMES, docker_config_credentials, find_credentials

PAGE = ROOT / "docs" / "registries.md"
TEXT = PAGE.read_text(encoding="utf-8")


def section(title: str) -> str:
    found = re.search(rf"^## {re.escape(title)}\n(?P<body>.*?)(?=^## |\Z)", TEXT, re.M | re.S)
    assert found, f"docs/registries.md has no section {title!r}"
    return found["body"]


def code_blocks(text: str, lang: str) -> list[str]:
    return re.findall(rf"^```{lang}\n(.*?)^```", text, re.M | re.S)


def table_rows() -> list[list[str]]:
    table = [line for line in section("How a name is read").splitlines() if line.startswith("|")]
    return [[cell.strip().strip("`") for cell in line.strip("|").split("|")] for line in table[2:]]


def test_the_sections_name_each_registry():
    titles = re.findall(r"^## (.+)$", TEXT, re.M)
    for title in ("Docker Hub", "GHCR", "ECR", "Artifact Registry", "ACR", "Harbor"):
        assert title in titles


@pytest.mark.parametrize("row", table_rows(), ids=lambda row: row[0])
def test_each_name_in_the_table_is_read_as_the_table_says(row):
    written, registry, path, api = row
    if api.startswith("refused"):
        with pytest.raises(UsageError, match=re.escape(path)) as refused:
            RegistryRepository.parse(written)
        assert f"exit {refused.value.exit_code}" in api
        return
    repo = RegistryRepository.parse(written)
    assert (repo.host, repo.name, repo.api_host, str(repo)) == (registry, path, api, written)


def test_every_example_name_on_the_page_is_in_the_table_or_refused():
    examples = {row[0] for row in table_rows()}
    names_part = TEXT[: TEXT.index("## Self-hosted with a private CA")]  # the rest names networks and paths
    for name in re.findall(r"`([a-z0-9.:-]+(?:/[a-z0-9._-]+)+)`", names_part):
        if "/" in name and not name.startswith(("https:", "docker-credential")) and "." in name.split("/")[0]:
            found = parse_repository(name)
            refused = found is not None and found.hub and found.path.startswith("library/")  # said refused
            assert name in examples or name.endswith("/v1/") or refused, name


def test_names_are_lower_cased_as_the_page_says():
    assert lower_cased("GHCR.io/MyOrg/Models") == "ghcr.io/myorg/models"
    assert lower_cased("Team/Models") == "team/models"


# -- where credentials come from ----------------------------------------------------------------


def sources() -> list[str]:
    """The source labels the page's numbered list gives, in its order."""
    listed = re.findall(r"^\d+\. (.*?)(?=^\d+\. |^$)", section("Where credentials come from"), re.M | re.S)
    return [
        label
        for item in listed
        for label in re.findall(r"`([^`]+)`", item)
        if label == "inputs" or label.startswith("TRITON_RELEASE_USERNAME/") or " in CONFIG" in label
    ]


@pytest.fixture
def place(tmp_path):
    bin_dir, config_dir = tmp_path / "bin", tmp_path / "docker"
    bin_dir.mkdir()
    env = {
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        "DOCKER_CONFIG": str(config_dir),
        "HOME": str(tmp_path),
    }
    return env, bin_dir, config_dir


def test_the_sources_are_listed_in_the_order_they_are_tried_with_the_labels_the_report_gives(place):
    env, bin_dir, config_dir = place
    host = "registry.example"
    write_helper(bin_dir, "helper", {host: ("h", "h-pw")})
    write_helper(bin_dir, "store", {host: ("s", "s-pw")})
    config = config_dir / "config.json"
    every = {
        "auths": dict(auths={host: ("a", "a-pw")}),
        "credsStore": dict(auths={host: ("a", "a-pw")}, creds_store="store"),
        "credHelpers": dict(auths={host: ("a", "a-pw")}, creds_store="store", cred_helpers={host: "helper"}),
    }
    found = []
    for kind in ("auths", "credsStore", "credHelpers"):
        write_docker_config(config_dir, **every[kind])
        found.append(find_credentials(host, env).source)
    with_env = {**env, ENV_NAMES[0]: "e", ENV_NAMES[1]: "e-pw"}
    found += [find_credentials(host, with_env).source, find_credentials(host, with_env, "i", "i-pw").source]
    expected = [
        label.replace("docker-credential-NAME", "docker-credential-{name}").replace("CONFIG", str(config))
        for label in sources()
    ]
    assert expected == [
        "inputs",
        "TRITON_RELEASE_USERNAME/_PASSWORD",
        f"docker-credential-{{name}} (credHelpers in {config})",
        f"docker-credential-{{name}} (credsStore in {config})",
        f"auths in {config}",
    ]
    tried = [expected[0], expected[1], expected[2].format(name="helper"), expected[3].format(name="store"), expected[4]]
    assert found == tried[::-1]  # found from the last source up: each one added wins over those before
    assert find_credentials("elsewhere.example", env) is None  # none: anonymous


def test_a_failing_helper_and_an_identity_token_are_warnings_and_the_next_source_is_read(place, caplog):
    env, bin_dir, config_dir = place
    write_helper(bin_dir, "broken", {}, behaviour="fail")
    write_docker_config(
        config_dir,
        auths={"a.example": ("a", "a-pw"), "t.example": {"identitytoken": "refresh"}},
        cred_helpers={"a.example": "broken"},
    )
    assert docker_config_credentials("a.example", env).source.startswith("auths in ")
    assert docker_config_credentials("t.example", env) is None
    said = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert "docker-credential-broken" in said[0] and "identity token" in said[1]


def test_the_config_file_is_docker_config_else_home(place, tmp_path):
    env, _, config_dir = place
    write_docker_config(config_dir, auths={"x.example": ("d", "pw")})
    write_docker_config(tmp_path / ".docker", auths={"x.example": ("h", "pw")})
    assert docker_config_credentials("x.example", env).username == "d"
    assert docker_config_credentials("x.example", {"HOME": str(tmp_path)}).username == "h"
    assert "`$DOCKER_CONFIG/config.json`, else `~/.docker/config.json`" in section("Where credentials come from")


# -- each registry's snippets --------------------------------------------------------------------


@pytest.mark.parametrize(("title", "helper"), [("ECR", "ecr-login"), ("Artifact Registry", "gcloud")])
def test_the_docker_config_a_registry_section_shows_runs_its_helper(place, title, helper):
    env, bin_dir, config_dir = place
    [block] = code_blocks(section(title), "json")
    config = json.loads(block)
    [(host, named)] = config["credHelpers"].items()
    assert named == helper
    write_helper(bin_dir, helper, {host: ("u", "token")})
    config_dir.mkdir()
    (config_dir / "config.json").write_text(block)
    [row] = [row for row in table_rows() if row[1] == host]
    repo = open_repository(row[0], env)
    assert repo.credentials.source.startswith(f"docker-credential-{helper} (credHelpers in ")


def test_the_ecr_shell_lines_set_the_variables_the_tool_reads():
    [block] = code_blocks(section("ECR"), "sh")
    names = [shlex.split(line)[1].split("=", 1)[0] for line in block.strip().splitlines()]
    assert tuple(names) == ENV_NAMES


@pytest.mark.parametrize(
    "username", ["robot$team+release", "oauth2accesstoken", "00000000-0000-0000-0000-000000000000"]
)
def test_the_user_names_the_page_gives_reach_the_token_service_as_given(username):
    assert f"`{username}`" in TEXT
    with FakeRegistry(user=username, password="the-secret") as fake:
        env = {ENV_NAMES[0]: username, ENV_NAMES[1]: "the-secret", "HOME": "/nonexistent"}
        assert open_repository(f"{fake.address}/team/models", env).tags() == ["1.0.0", "latest"]


def test_the_ghcr_step_gives_the_repository_and_the_token_pair():
    [block] = [b for b in yaml_blocks(PAGE) if "ghcr.io" in b.text]
    data = yaml.safe_load(block.text)
    assert data["permissions"]["packages"] == "write"
    step = next(step for step in data["steps"] if step.get("uses") == "org/triton-release@v1")
    assert step["with"]["repository"] == "ghcr.io/${{ github.repository }}"
    assert step["with"]["password"] == "${{ secrets.GITHUB_TOKEN }}"


def test_the_write_once_fix_is_tags_version_and_the_link_lands_on_the_tags_pages_section(tmp_path):
    from triton_release.registry.write_once import refused_overwrite
    from triton_release.settings import resolve

    [block] = [b for b in yaml_blocks(PAGE) if b.text.strip() == "tags: version"]
    assert resolve(yaml.safe_load(block.text), cwd=tmp_path).publish.tags == "version"
    assert "## A write-once (immutable) repository" in (ROOT / "docs" / "tags.md").read_text(encoding="utf-8")
    for title in ("ECR", "Harbor"):
        assert "(tags.md#a-write-once-immutable-repository)" in section(title)
    harbor = b'{"errors":[{"code":"PRECONDITION","message":"Failed to process request due to \'models:1.0\' configured as immutable."}]}'
    assert refused_overwrite(412, harbor) and refused_overwrite(409, harbor) and refused_overwrite(403, harbor)


# -- Docker Hub ------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["models", "docker.io/models"])
def test_a_hub_name_without_namespace_is_refused_with_exit_2(name):
    assert f"`{name}`" in section("Docker Hub")
    with pytest.raises(UsageError, match="library/models") as refused:
        RegistryRepository.parse(name)
    assert refused.value.exit_code == 2 and "nobody can push to" in refused.value.message


def test_hub_credentials_are_found_under_the_index_url(place):
    env, bin_dir, config_dir = place
    assert "`https://index.docker.io/v1/`" in section("Docker Hub")
    write_docker_config(config_dir, auths={"https://index.docker.io/v1/": ("hub-user", "pw")})
    assert open_repository("team/models", env).credentials.username == "hub-user"
    write_helper(bin_dir, "desktop", {"https://index.docker.io/v1/": ("store-user", "pw")})
    write_docker_config(config_dir, creds_store="desktop")
    assert open_repository("docker.io/team/models", env).credentials.username == "store-user"


class Answer(requests.adapters.BaseAdapter):
    def __init__(self, status: int, headers: dict) -> None:
        super().__init__()
        self.status, self.headers, self.sent = status, headers, 0

    def send(self, request, **kwargs):
        self.sent += 1
        answer = requests.Response()
        answer.status_code, answer.url, answer._content, answer.request = self.status, request.url, b"", request
        answer.headers.update(self.headers)
        return answer

    def close(self):
        pass


@pytest.mark.parametrize("headers", [{"Retry-After": "600"}, {"ratelimit-reset": "600"}])
def test_a_hub_429_is_its_pull_rate_limit_when_it_resets_and_to_log_in(headers):
    repo = RegistryRepository.parse("team/models")
    transport = Answer(429, headers)
    repo.session.mount("https://registry-1.docker.io/", transport)
    with pytest.raises(InfrastructureError) as failed:
        repo.tags()
    message = failed.value.message
    assert "pull rate limit" in message and "resets in 10 min" in message and "Log in" in message
    assert failed.value.exit_code == 3 and "(exit 3)" in section("Docker Hub")
    assert transport.sent == 1  # not waited for
