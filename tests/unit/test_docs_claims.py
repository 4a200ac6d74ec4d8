"""What every workflow a reader may copy claims, checked: each file of .github/workflows/ and each
```yaml block of README.md and docs/**/*.md, fragments included.

- A `permissions:` block (the workflow's, a job's, a fragment's) names `contents:`: a block that
  names any scope sets the others to `none`, and `actions/checkout` of a private repository then
  fails. A whole workflow has one, at its top or in every job.
- Every `actions/checkout` step says `fetch-depth: 0`: a release reads the history since the last
  release, which a shallow clone of one commit lacks.
- `org` in `org/triton-release` is a placeholder, and one section of the README says so and how to
  pin the action (a tag, a full commit SHA, the image's digest); every page that names the action
  outside a code block links there.
- A step that uses the action (`uses: ./`, `org/triton-release@...`, its image by tag or digest)
  gives only inputs action.yml declares, and `username` and `password` together or neither (the
  tool uses neither of a lone one: the registry is then reached anonymously).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from support.docs import yaml_blocks
from support.stack import ROOT

ACTION = yaml.safe_load((ROOT / "action.yml").read_text(encoding="utf-8"))
INPUTS = set(ACTION["inputs"])
# docker://ghcr.io/org/triton-release:v1 -> the image, and the action's name org/triton-release
IMAGE = re.sub(r"^docker://|[:@][^/]*$", "", ACTION["runs"]["image"])
ACTION_NAME = "/".join(IMAGE.split("/")[1:])
DOCKER_WITH = {"entrypoint", "args"}  # what `with:` passes to a `uses: docker://...` step besides inputs
PAIRED = ("username", "password")

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
WORKFLOW_FILES = sorted((ROOT / ".github" / "workflows").glob("*.y*ml"))


@dataclass(frozen=True)
class Snippet:
    where: str  # page:line of its fence, or the workflow file
    data: object


SNIPPETS = [
    *(
        Snippet(str(path.relative_to(ROOT)), yaml.safe_load(path.read_text(encoding="utf-8")))
        for path in WORKFLOW_FILES
    ),
    *(Snippet(block.where, yaml.safe_load(block.text)) for page in PAGES for block in yaml_blocks(page)),
]


def is_step(node: object) -> bool:
    return isinstance(node, dict) and ("uses" in node or "run" in node)


def steps(node: object) -> list[dict]:
    """Every step inside a workflow, a job, a list of steps or one step (a `steps:` list anywhere)."""
    if is_step(node):
        return [node]  # type: ignore[list-item]
    if isinstance(node, list):
        return [step for item in node for step in steps(item)]
    if isinstance(node, dict):
        return [step for value in node.values() for step in steps(value)]
    return []


def jobs(data: object) -> dict:
    return data.get("jobs") or {} if isinstance(data, dict) else {}


def is_workflow(data: object) -> bool:
    return isinstance(data, dict) and "jobs" in data and ("on" in data or True in data)  # YAML 1.1: `on` is true


def uses_the_action(step: dict) -> bool:
    uses = str(step.get("uses", ""))
    return uses == "./" or uses.startswith(f"{ACTION_NAME}@") or re.match(rf"docker://{re.escape(IMAGE)}[:@]", uses)


def permission_problems(data: object) -> list[str]:
    """Each `permissions:` block (the top's, each job's) that does not name `contents:`, and a whole
    workflow that has none where every job would need one."""
    blocks = []
    if isinstance(data, dict) and "permissions" in data:
        blocks.append(("the workflow" if is_workflow(data) else "the snippet", data["permissions"]))
    blocks += [(f"job {name}", job["permissions"]) for name, job in jobs(data).items() if "permissions" in job]
    found = [
        f"{owner}'s permissions: {block!r} do not name contents: (read, or write to push back)"
        for owner, block in blocks
        if not (isinstance(block, dict) and "contents" in block)
    ]
    if is_workflow(data) and "permissions" not in data:
        found += [
            f"job {name} has no permissions: block" for name, job in jobs(data).items() if "permissions" not in job
        ]
    return found


def checkout_problems(data: object) -> list[str]:
    return [
        f"{step['uses']} without fetch-depth: 0 (a shallow clone lacks the history since the last release)"
        for step in steps(data)
        if str(step.get("uses", "")).startswith("actions/checkout@")
        and (step.get("with") or {}).get("fetch-depth") != 0
    ]


def input_problems(data: object) -> list[str]:
    found = []
    for step in filter(uses_the_action, steps(data)):
        given = step.get("with") or {}
        name = step.get("id") or step["uses"]
        allowed = INPUTS | (DOCKER_WITH if str(step["uses"]).startswith("docker://") else set())
        found += [f"{name}: input {key} is not in action.yml" for key in given if key not in allowed]
        half = [key for key in PAIRED if key in given]
        if len(half) == 1:
            missing = next(key for key in PAIRED if key not in given)
            found.append(f"{name}: {half[0]} without {missing} (the tool then uses neither)")
    return found


def problems(data: object) -> list[str]:
    return permission_problems(data) + checkout_problems(data) + input_problems(data)


def test_every_page_and_workflow_was_read():
    wheres = {snippet.where.split(":")[0] for snippet in SNIPPETS}
    assert {"README.md", "docs/action.md", "docs/evidence.md", "docs/latency.md"} <= wheres
    assert {f".github/workflows/{p.name}" for p in WORKFLOW_FILES} <= wheres
    assert sum(1 for s in SNIPPETS if steps(s.data)) >= 10, "fewer workflow snippets than the pages hold"


@pytest.mark.parametrize("snippet", SNIPPETS, ids=lambda s: s.where)
def test_what_a_reader_copies_works_as_copied(snippet):
    found = problems(snippet.data)
    assert not found, f"{snippet.where}:\n  " + "\n  ".join(found)


def test_the_checks_catch_what_they_are_for():
    """Each check, on a workflow that is wrong on purpose."""
    wrong = yaml.safe_load(
        f"""
        on: workflow_dispatch
        permissions:
          packages: write
        jobs:
          one:
            runs-on: ubuntu-latest
            permissions: read-all
            steps:
              - uses: actions/checkout@v4
              - uses: actions/checkout@v4
                with: {{fetch-depth: 1}}
              - id: a
                uses: {ACTION_NAME}@v1
                with: {{password: x, repositroy: y}}
              - uses: docker://{IMAGE}@sha256:{"0" * 64}
                with: {{entrypoint: triton-release-action, username: u}}
              - uses: ./
                with: {{username: u, password: p, mode: test}}
          two:
            runs-on: ubuntu-latest
            steps: [{{run: "true"}}]
        """.replace("\n        ", "\n")
    )
    assert problems(wrong) == [
        "the workflow's permissions: {'packages': 'write'} do not name contents: (read, or write to push back)",
        "job one's permissions: 'read-all' do not name contents: (read, or write to push back)",
        *["actions/checkout@v4 without fetch-depth: 0 (a shallow clone lacks the history since the last release)"] * 2,
        "a: input repositroy is not in action.yml",
        "a: password without username (the tool then uses neither)",
        f"docker://{IMAGE}@sha256:{'0' * 64}: username without password (the tool then uses neither)",
    ]
    del wrong["permissions"]
    assert "job two has no permissions: block" in permission_problems(wrong)
    fragment = {"permissions": {"id-token": "write"}, "steps": [{"uses": "actions/checkout@v4"}]}
    assert len(problems(fragment)) == 2


PLACEHOLDER = "naming-and-pinning-the-action"


def prose(page: Path) -> str:
    """A page's text outside its fenced code blocks."""
    kept, fenced = [], False
    for line in page.read_text(encoding="utf-8").split("\n"):
        if re.match(r"^\s*```", line):
            fenced = not fenced
        elif not fenced:
            kept.append(line)
    return "\n".join(kept)


def test_the_readme_says_org_is_a_placeholder_and_how_to_pin_the_action():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = re.search(r"^#+ Naming and pinning the action\n(?P<body>.*?)^#", readme, re.M | re.S)
    assert section, "the README has no section 'Naming and pinning the action'"
    body = section["body"]
    assert f"`{ACTION_NAME.split('/')[0]}` is a placeholder" in body
    for way in ("a tag", "a full commit SHA", "the action image's digest", f"docker://{IMAGE}@sha256:"):
        assert way in body, f"the README's pinning section does not name {way}"


@pytest.mark.parametrize("page", [p for p in PAGES if p.name != "README.md"], ids=lambda p: str(p.relative_to(ROOT)))
def test_a_page_that_names_the_action_links_to_the_placeholder_section(page):
    text = prose(page)
    if ACTION_NAME in text:
        assert f"README.md#{PLACEHOLDER})" in text, (
            f"{page.relative_to(ROOT)} names {ACTION_NAME} but never links to README.md#{PLACEHOLDER}, which says "
            "what to put for its owner"
        )


# -- docs/tags.md: every tag the tool writes, which move, what a write-once repository answers ------

TAGS_PAGE = ROOT / "docs" / "tags.md"


def _tag_rows() -> list[list[str]]:
    text = TAGS_PAGE.read_text(encoding="utf-8")
    table = text.split("## Every family", 1)[1].split("\n\n", 2)[1]
    return [[c.strip() for c in line.strip("|").split("|")] for line in table.splitlines()[2:]]


def _example(row: list[str]) -> str:
    return re.search(r"`([^`]+)`", row[1])[1].replace("<64 hex>", "a" * 64)


def test_the_tags_page_lists_every_family_the_contract_owns_each_as_it_parses():
    from triton_release import contract

    families = {_example(row): contract.owned_family(_example(row)) for row in _tag_rows()}
    assert set(families.values()) - {None} == set(contract.FAMILIES)
    assert [tag for tag, family in families.items() if family is None] == ["latest"]  # the channel: the user's
    ledger = next(tag for tag in families if contract.is_ledger_tag(tag))
    assert contract.parse_ledger_entry_tag(ledger) == ("1.4.0", "confirmed", "0123456789ab")


def test_the_tags_page_says_which_tags_only_tags_all_writes_as_the_code_writes_them():
    import semver

    from triton_release import contract

    only_all = {_example(row) for row in _tag_rows() if "with `tags: all`" in row[2]}
    version, commit = semver.Version(1, 4, 0), "0123456789ab" + "0" * 28
    everything = contract.moving_tags(version, commit, "latest", "all")
    assert only_all == set(everything) - set(contract.moving_tags(version, commit, "latest", "version")) - {"1"}
    assert "1" in everything and contract.owned_family("1") == contract.owned_family("1.4")  # X, the row's X.Y


def test_the_refusal_the_tags_page_quotes_is_taken_for_one():
    from triton_release.registry.write_once import refused_overwrite

    text = TAGS_PAGE.read_text(encoding="utf-8")
    body = text.split("```json\n", 1)[1].split("```", 1)[0]
    assert refused_overwrite(400, body.encode()) is not None


def test_the_tags_page_s_settings_file_sets_tags_version(tmp_path):
    from triton_release.settings import resolve

    [block] = [b for b in yaml_blocks(TAGS_PAGE) if "tags:" in b.text]
    assert resolve(yaml.safe_load(block.text), cwd=tmp_path).publish.tags == "version"


# -- docs/registries.md: trust, plain http, the permissions each command needs -------------------

REGISTRIES_PAGE = ROOT / "docs" / "registries.md"


def _section(title: str) -> str:
    text = REGISTRIES_PAGE.read_text(encoding="utf-8")
    return text.split(f"## {title}\n", 1)[1].split("\n## ", 1)[0]


def _fenced(text: str, lang: str) -> list[str]:
    return [block.split("\n", 1)[1] for block in text.split("```")[1::2] if block.startswith(lang + "\n")]


def test_the_registries_page_quotes_the_untrusted_certificate_refusal_as_the_code_words_it(monkeypatch):
    import ssl

    from triton_release.errors import InfrastructureError
    from triton_release.registry import trust

    [quoted] = _fenced(_section("Self-hosted with a private CA"), "text")
    monkeypatch.setattr(trust, "certificate_issuer", lambda *_: "CN=Team CA,O=Team")
    failure = ssl.SSLCertVerificationError(1, "certificate verify failed")
    failure.verify_code = 20  # X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT_LOCALLY
    refusal = trust.Trust().untrusted("registry.example.com:5443", failure)
    assert isinstance(refusal, InfrastructureError) and refusal.exit_code == 3
    assert refusal.message.startswith(" ".join(quoted.replace("...", "").split()).rstrip(", "))


def test_the_registries_page_names_the_trust_sources_as_the_code_reads_them(tmp_path):
    from triton_release.registry import trust
    from triton_release.settings import BY_KEY, resolve

    section = _section("Self-hosted with a private CA")
    assert f"`{trust.CERTS_D}/HOST:PORT/`" in section and f"`{trust.CERTS_D_VARIABLE}`" in section
    assert "`registry_ca` setting" in section and "`--registry-ca`" in section and "`registry-ca`" in section
    assert "registry_ca" in BY_KEY and "registry-ca" in INPUTS
    [settings_file] = [b for b in yaml_blocks(REGISTRIES_PAGE) if b.text.startswith("registry_ca:")]
    (tmp_path / "triton-release.yaml").write_text(settings_file.text)
    (tmp_path / "elsewhere").mkdir()
    relative = yaml.safe_load(settings_file.text)["registry_ca"]
    found = resolve({}, str(tmp_path / "triton-release.yaml"), cwd=tmp_path / "elsewhere").registry_ca
    assert Path(found).resolve() == (tmp_path / relative).resolve()  # read from the file's folder


def test_the_registries_page_s_permissions_table_lists_commands_that_take_their_flags():
    import argparse

    from triton_release.cli.main import parser
    from triton_release.registry import client

    section = _section("Permissions each command needs")
    assert "`pull` to read, `pull,push` to write, and\n`delete` to delete" in section
    assert set(client._ACTIONS.values()) | {client._WRITE} == {"pull", "pull,push", "delete"}
    top = parser()
    [sub] = [a for a in top._actions if isinstance(a, argparse._SubParsersAction)]
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in section.splitlines() if line.startswith("| `")]
    assert len(rows) == 8
    for command, _reads, writes, deletes in rows:
        name, *flags = command.strip("`").split()
        options = {o for action in sub.choices[name]._actions for o in action.option_strings}
        assert "--registry-ca" in options, f"{name} reaches a registry and should take --registry-ca"
        named = [f for f in flags if f.startswith("--")] + re.findall(r"`(--[\w-]+)`", deletes)
        assert set(named) <= options, (name, named)
        assert (writes == "no") == (name == "verify" or "--no-push" in flags), command


def test_the_registries_page_s_plain_http_hosts_are_those_the_code_allows():
    import json

    from triton_release.registry import trust

    section = _section("Insecure LAN registries")
    assert "`127.0.0.0/8`, `::1`, `localhost`" in section
    assert all(map(trust.is_loopback, ["127.0.0.1:5000", "127.8.9.10", "[::1]:5000", "localhost:5000"]))
    [daemon_json] = _fenced(section, "json")
    listed = json.loads(daemon_json)["insecure-registries"]
    # as `docker info` reports daemon.json's list: names as index configs, networks as CIDRs
    info = {
        "RegistryConfig": {
            "InsecureRegistryCIDRs": [e for e in listed if "/" in e],
            "IndexConfigs": {e: {"Name": e, "Secure": False} for e in listed if "/" not in e},
        }
    }
    assert trust.insecure_in(info, "registry.lan:5000") and trust.insecure_in(info, "10.1.2.3:5000")
    assert not trust.insecure_in(info, "registry.lan:5001") and not trust.insecure_in(info, "192.168.0.2:5000")
