"""One grammar: every tag, digest and reference the tool reads is parsed by one function of
contract.py, and no other module of src/ compiles a regex for a release version or for an
`@sha256:` reference, nor splits a reference at its `@`."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
import semver

from triton_release import contract
from triton_release.errors import UsageError

SRC = Path(__file__).resolve().parents[2] / "src" / "triton_release"
HEX = "ab" * 32
DIGEST = f"sha256:{HEX}"
REPO = "127.0.0.1:5000/team/models"


# -- (a) the parsers: what each accepts and what it refuses -------------------------------------


@pytest.mark.parametrize(
    ("text", "version"),
    [("0.0.0", semver.Version(0, 0, 0)), ("1.4.0", semver.Version(1, 4, 0)), ("10.20.30", semver.Version(10, 20, 30))],
)
def test_parse_release_takes_semver_x_y_z(text, version):
    assert contract.parse_release(text) == version
    assert contract.is_release_tag(text)
    assert contract.looks_like_release(text)


@pytest.mark.parametrize(
    "text", ["", "1.4", "1", "v1.4.0", "1.02.3", "01.2.3", "1.4.0\n", " 1.4.0", "1.4.0-rc1", "1.4.0.1", "a.b.c"]
)
def test_parse_release_refuses_anything_else(text):
    assert contract.parse_release(text) is None
    assert not contract.is_release_tag(text)


def test_a_look_alike_with_leading_zeros_is_not_a_release_but_reads_as_one():
    assert contract.parse_release("1.02.3") is None and contract.looks_like_release("1.02.3")
    assert not contract.looks_like_release("1.2") and not contract.looks_like_release("1.2.3\n")


def test_git_tags_are_v_and_a_release():
    assert contract.git_tag(semver.Version(1, 2, 3)) == "v1.2.3"
    assert contract.parse_git_tag("v1.2.3") == semver.Version(1, 2, 3)
    for tag in ("1.2.3", "v1.2", "v01.2.3", "vv1.2.3", "v1.2.3x", "release-1.2.3"):
        assert contract.parse_git_tag(tag) is None, tag


def test_moving_and_provenance_tags():
    assert contract.moving_tags(semver.Version(1, 4, 0), "0123456789abcdef", "latest") == [
        "1.4",
        "1",
        "sha-0123456789ab",
        "latest",
    ]
    assert contract.moving_tags(semver.Version(2, 0, 1), None, "stable") == ["2.0", "2", "stable"]
    assert all(map(contract.is_moving_tag, ["1", "1.4", "10.20"]))
    assert not any(map(contract.is_moving_tag, ["1.4.0", "", "1.", "x", "1.4\n"]))
    assert contract.is_provenance_tag(contract.provenance_tag("0123456789abcdef"))


@pytest.mark.parametrize(("tag", "ok"), [("latest", True), ("a" * 128, True), ("_x.y-z", True), ("a" * 129, False)])
def test_is_tag_is_dockers_grammar(tag, ok):
    assert contract.is_tag(tag) is ok


@pytest.mark.parametrize("tag", ["", "-x", ".x", "a b", "a/b", "a:b", "latest\n"])
def test_is_tag_refuses_what_docker_refuses(tag):
    assert not contract.is_tag(tag)


def test_parse_digest():
    assert contract.parse_digest(DIGEST) == HEX
    assert contract.digest_hex(DIGEST) == HEX
    for text in ("", HEX, f"sha256:{HEX[:-1]}", f"sha256:{HEX.upper()}", f"sha512:{HEX}", f"{DIGEST}\n", f" {DIGEST}"):
        assert contract.parse_digest(text) is None, text
        with pytest.raises(UsageError):
            contract.digest_hex(text)


def test_parse_digest_ref():
    assert contract.parse_digest_ref(f"{REPO}@{DIGEST}") == (REPO, DIGEST)
    assert contract.parse_digest_ref(f"ghcr.io/Org/Models@{DIGEST}") == ("ghcr.io/Org/Models", DIGEST)
    for ref in (
        f"{REPO}:candidate-0123456789ab",
        f"{REPO}@{DIGEST[:-2]}",
        f"@{DIGEST}",
        f"{REPO}@{DIGEST}x",
        f"{REPO}@@{DIGEST}",
        f"{REPO} x@{DIGEST}",
        f"{REPO}@{DIGEST}\n",
        "",
    ):
        assert contract.parse_digest_ref(ref) is None, ref


def test_parse_tag_ref():
    assert contract.parse_tag_ref(f"{REPO}:1.4.0") == (REPO, "1.4.0")
    assert contract.parse_tag_ref("ghcr.io/org/models:latest") == ("ghcr.io/org/models", "latest")
    assert contract.parse_tag_ref("localhost:5000/m:sha-0123456789ab") == ("localhost:5000/m", "sha-0123456789ab")
    for ref in (REPO, "models:1.4.0", f"{REPO}:", f"{REPO}:a b", f"{REPO}@{DIGEST}", f"{REPO}:1.4.0,x", ""):
        assert contract.parse_tag_ref(ref) is None, ref


def test_parse_repository():
    found = contract.parse_repository(REPO)
    assert found is not None and (found.registry, found.path, found.ref) == ("127.0.0.1:5000", "team/models", REPO)
    found = contract.parse_repository("ghcr.io/org/models")
    assert found is not None and (found.registry, found.path) == ("ghcr.io", "org/models")
    for ref in ("ghcr.io/Org/models", f"{REPO}:1.0.0", f"{REPO}/", f"{REPO}\n", ""):
        assert contract.parse_repository(ref) is None, ref
    assert contract.lower_cased("ghcr.io/Org/Models") == "ghcr.io/org/models"
    assert contract.lower_cased("ghcr.io/Org/Models:Tag") == "ghcr.io/Org/Models:Tag"


def test_candidate_tags():
    assert contract.candidate_tag("0123456789abcdef" * 2) == "candidate-0123456789ab"
    assert contract.is_candidate_tag("candidate-0123456789ab")
    for tag in ("candidate-0123456789a", "candidate-0123456789abc", "candidate", "candidate-0123456789AB"):
        assert not contract.is_candidate_tag(tag), tag
    with pytest.raises(UsageError):
        contract.candidate_tag("main")


def test_shard_result_tags_round_trip():
    tag = contract.shard_result_tag(DIGEST, "shard-3")
    assert tag == f"sha256-{HEX}.golden-shard-3"
    assert contract.parse_shard_result_tag(tag) == (DIGEST, "shard-3")
    for other in (
        f"sha256-{HEX}",
        f"sha256-{HEX}.att",
        f"sha256-{HEX}.golden-",
        f"sha256-{HEX[:-1]}.golden-s",
        "1.0.0",
    ):
        assert contract.parse_shard_result_tag(other) is None, other


def test_shard_names():
    assert contract.is_shard_name("shard-1") and contract.is_shard_name("s" * 49)
    assert not contract.is_shard_name("s" * 50) and not contract.is_shard_name("../x")
    assert contract.is_planned_shard_name("shard-1") and contract.is_planned_shard_name("shard-256")
    for name in ("shard-0", "shard-01", "shard-1000", "shard-1\n", "Shard-1", "s1"):
        assert not contract.is_planned_shard_name(name), name


def test_evidence_tags_round_trip():
    assert contract.evidence_tag(DIGEST) == f"sha256-{HEX}.att"
    for tag in (f"sha256-{HEX}.att", f"sha256-{HEX}.sig", f"sha256-{HEX}.sbom", f"sha256-{HEX}"):
        assert contract.evidence_subject(tag) == DIGEST
    for tag in (f"sha256-{HEX}.golden-shard-1", f"sha256-{HEX}.att\n", f"sha256-{HEX}.txt", "latest"):
        assert contract.evidence_subject(tag) is None, tag
    with pytest.raises(UsageError):
        contract.evidence_tag("latest")


# -- (b) no other copy: a scan of src/ ----------------------------------------------------------

RE_CALLS = {"compile", "match", "fullmatch", "search", "findall", "finditer", "sub", "subn", "split"}
# a release version: three numbers between literal dots, however the digits are spelled: \d+,
# [0-9]+, (0|[1-9]\d*), a named group of one, or an f-string's {field}
_NUMBER = r"\(?(\?P<\w+>)?(\\d[+*]|\[0-9\][+*]|\(0\|\[1-9\]\\d\*\)|\{[^}]+\})\)?"
RELEASE_LIKE = re.compile(rf"{_NUMBER}\\\.{_NUMBER}\\\.{_NUMBER}")
DIGEST_REF_LIKE = re.compile(r"@.*sha256")


def _pattern_text(node: ast.expr) -> str | None:
    """The source text of a regex literal (an f-string's literal parts, with its fields as {name})."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(
            part.value if isinstance(part, ast.Constant) else "{" + ast.unparse(part.value) + "}"
            for part in node.values
        )
    return None


def regexes(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, pattern) of every literal pattern given to a function of `re`."""
    found = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id == "re"
            and node.func.attr in RE_CALLS
            and node.args
            and (text := _pattern_text(node.args[0])) is not None
        ):
            found.append((node.lineno, text))
    return found


def at_splits(tree: ast.AST) -> list[int]:
    """Lines that split text at "@" (split, rsplit, partition, rpartition)."""
    return [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in {"split", "rsplit", "partition", "rpartition"}
        and node.args
        and isinstance(node.args[0], ast.Constant)
        and node.args[0].value == "@"
    ]


# registry/client.py drops the user:password@ of a URL's netloc: a URL, not an image reference
AT_SPLITS_ALLOWED = {"registry/client.py"}


def sources() -> list[tuple[str, ast.AST]]:
    return [(str(p.relative_to(SRC)), ast.parse(p.read_text(), str(p))) for p in sorted(SRC.rglob("*.py"))]


def test_the_detectors_see_the_grammars_they_look_for():
    contract_tree = ast.parse((SRC / "contract.py").read_text())
    patterns = [text for _, text in regexes(contract_tree)]
    assert any(RELEASE_LIKE.search(text) for text in patterns)
    assert any(DIGEST_REF_LIKE.search(text) for text in patterns)
    for copy in (
        r"^\d+\.\d+\.\d+$",
        r"[0-9]+\.[0-9]+\.[0-9]+",
        r"^v(\d+)\.(\d+)\.(\d+)$",
        r"(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)",
    ):
        assert RELEASE_LIKE.search(copy), copy
    assert DIGEST_REF_LIKE.search(r"^(?P<repository>[^@\s]+)@(?P<digest>sha256:[0-9a-f]{64})$")
    assert regexes(ast.parse('import re\nre.compile(r"^\\d+\\.\\d+\\.\\d+$")'))
    assert at_splits(ast.parse('ref.partition("@")'))


def test_no_module_but_the_contract_compiles_a_release_version_or_a_digest_reference():
    copies = [
        f"{path}:{line}: {text}"
        for path, tree in sources()
        if path != "contract.py"
        for line, text in regexes(tree)
        if RELEASE_LIKE.search(text) or DIGEST_REF_LIKE.search(text)
    ]
    assert not copies, "parse these with contract.py's functions instead:\n" + "\n".join(copies)


def test_no_module_but_the_contract_splits_a_reference_at_its_at_sign():
    splits = [
        f"{path}:{line}"
        for path, tree in sources()
        if path != "contract.py" and path not in AT_SPLITS_ALLOWED
        for line in at_splits(tree)
    ]
    assert not splits, "parse REPO@sha256:... with contract.parse_digest_ref instead:\n" + "\n".join(splits)
