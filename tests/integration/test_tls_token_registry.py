"""A self-hosted registry as a team runs one: Debian's docker-registry serving TLS with a
certificate from the team's own CA, and token auth (`auth: token`) against a token service that
grants alice pull, push and delete, carol pull and push, bob pull (support.registries.TokenRegistry,
support.tls). The CA is trusted as an admin trusts it, and nothing else trusts it: the system
store (the bundle update-ca-certificates writes, which OpenSSL and so truststore read; the test's
own, given as SSL_CERT_FILE), the Docker daemon's certs.d folder (the tool's read from a folder of
the test's, TRITON_RELEASE_DOCKER_CERTS_D; the daemon's own /etc/docker/certs.d/HOST:PORT/ca.crt
written for its pushes and removed after), or registry_ca. REQUESTS_CA_BUNDLE, CURL_CA_BUNDLE and
the like are unset, as on a runner.

Over it the tool runs as a user runs it (a process of its own): a first release, a change,
nothing changed, a rollback, --keep 1 (which deletes, so asks a token for delete), then the
refusals, each with its own message: a token refused delete (the release itself is out), a wrong
password, a pull-only token, a CA nothing trusts."""

from __future__ import annotations

import contextlib
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import docker
import pytest

from support.git import GitRepo
from support.models import python_model_files
from support.registries import TokenRegistry
from support.reports import read_report
from support.stack import BASE_IMAGE
from support.tls import PrivateCA, runner_env
from support.tool import tool_command
from triton_release import contract
from triton_release.registry.client import RegistryRepository
from triton_release.registry.credentials import Credentials
from triton_release.registry.trust import CERTS_D, CERTS_D_VARIABLE, Trust

pytestmark = pytest.mark.integration

USERS = {
    "alice": ("alice-pw", {"pull", "push", "delete"}),
    "carol": ("carol-pw", {"pull", "push"}),
    "bob": ("bob-pw", {"pull"}),
}


@dataclass(frozen=True)
class Outcome:
    code: int
    report: dict
    out: str

    @property
    def message(self) -> str:
        return " ".join((self.report.get("error") or {}).get("message", "").split())


@dataclass
class Site:
    """The registry, the CA and the ways of trusting it, and the git repository released from."""

    registry: TokenRegistry
    ca: PrivateCA
    git_repo: GitRepo
    target: str
    store: Path  # the system bundle with the CA in it (SSL_CERT_FILE)
    certs_d: Path  # a certs.d folder holding HOST:PORT/ca.crt, as the daemon's holds it
    nothing: Path  # a certs.d folder that holds nothing

    @property
    def repo(self) -> RegistryRepository:
        """The repository as alice reads it, trusting the CA through registry_ca."""
        return RegistryRepository.parse(
            self.target, Credentials("alice", USERS["alice"][0]), trust=Trust(self.ca.pem, self.nothing)
        )

    def run(self, *args: str, user: str = "alice", password: str | None = None, trust: str = "store") -> Outcome:
        """`triton-release *args` as `user`, the CA trusted by `trust`: store (the system store),
        certs.d (the daemon's folder), registry_ca (--registry-ca FILE) or none."""
        env = runner_env(
            TRITON_RELEASE_USERNAME=user,
            TRITON_RELEASE_PASSWORD=USERS[user][0] if password is None else password,
            **{CERTS_D_VARIABLE: str(self.certs_d if trust == "certs.d" else self.nothing)},
        )
        if trust == "store":
            env["SSL_CERT_FILE"] = str(self.store)
        extra = ["--registry-ca", str(self.ca.cert)] if trust == "registry_ca" else []
        report = self.git_repo.root.parent / "report.json"
        report.unlink(missing_ok=True)
        done = subprocess.run(
            tool_command(*args, *extra, "--report", str(report)),
            cwd=self.git_repo.root,
            capture_output=True,
            text=True,
            timeout=600,
            env=env,
        )
        return Outcome(done.returncode, read_report(report) if report.exists() else {}, done.stdout + done.stderr)

    def release(self, *extra: str, **kw) -> Outcome:
        return self.run("release", "--to", self.target, "--base-image", BASE_IMAGE, "--commit", *extra, **kw)

    def edit(self, note: str) -> None:
        """A change to a's newest version: the release bumps it (a minor release)."""
        newest = max(int(p.name) for p in (self.git_repo.models / "a").iterdir() if p.name.isdigit())
        model_py = self.git_repo.models / "a" / str(newest) / "model.py"
        model_py.write_text(f"# {note}\n" + model_py.read_text())
        self.git_repo.commit(f"a: {note}")


@pytest.fixture(scope="module")
def site(tmp_path_factory, base_layers, docker_client):
    root = tmp_path_factory.mktemp("tls-token-registry")
    ca = PrivateCA(root / "ca")
    registry = TokenRegistry(root / "registry", ca, USERS, base=base_layers)
    daemon_folder = CERTS_D / registry.address  # the daemon pushes and pulls the base's layers through it
    made_root = not CERTS_D.exists()
    daemon_folder.mkdir(parents=True, exist_ok=True)
    (daemon_folder / "ca.crt").write_text(ca.pem)
    git_repo = GitRepo(root / "work")
    git_repo.write(python_model_files("a"))
    git_repo.commit("one model")
    target = f"{registry.address}/team/models"
    try:
        yield Site(
            registry,
            ca,
            git_repo,
            target,
            ca.system_store(root / "store"),
            ca.certs_d(root / "certs.d", registry.address),
            root / "nothing",
        )
    finally:
        registry.close()
        shutil.rmtree(daemon_folder, ignore_errors=True)
        if made_root:
            shutil.rmtree(CERTS_D, ignore_errors=True)
        for image in docker_client.images.list(name=target):
            for tag in image.tags:
                if tag.startswith(f"{target}:"):
                    with contextlib.suppress(docker.errors.APIError):
                        docker_client.images.remove(tag, force=True)


def _releases(repo: RegistryRepository) -> list[str]:
    return [t for t in repo.tags() if contract.is_release_tag(t)]


def _asked(site: Site, user: str) -> set[str]:
    """The actions the tool (not the Docker daemon) asked the token service for as `user`, each
    request's set as asked."""
    return {
        scope.rpartition(":")[2]
        for who, scope, agent in site.registry.tokens.asked
        if who == user and agent.startswith("python-requests")
    }


def test_releases_change_and_roll_back_with_the_ca_trusted_as_an_admin_trusts_it(site):
    first = site.release(trust="store")
    assert first.code == 0, first.out[-3000:]
    assert first.report["version"] == "1.0.0"
    assert site.repo.digest("latest") == site.repo.digest("1.0.0") == first.report["digest"]

    site.edit("a change")
    second = site.release(trust="certs.d")
    assert second.code == 0, second.out[-3000:]
    assert second.report["version"] == "1.1.0" and site.repo.digest("latest") == site.repo.digest("1.1.0")

    unchanged = site.release(trust="registry_ca")
    assert unchanged.code == 0 and unchanged.report["released"] is False, unchanged.out[-3000:]

    rolled = site.run("rollback", "--repo", site.target, "--to-version", "1.0.0", trust="store")
    assert rolled.code == 0, rolled.out[-3000:]
    assert site.repo.digest("latest") == site.repo.digest("1.0.0")
    # each request asked for what it needed: reads pull, writes pull,push; nothing deleted yet
    assert _asked(site, "alice") == {"pull", "pull,push"}


def test_keep_asks_a_token_for_delete_and_deletes_the_old_releases(site):
    site.edit("a change kept alone")
    kept = site.release("--keep", "1", trust="store")
    assert kept.code == 0, kept.out[-3000:]
    assert kept.report["version"] == "1.2.0"
    assert _releases(site.repo) == ["1.2.0"]  # latest moved on to 1.2.0: 1.0.0 and 1.1.0 were not kept
    assert "delete" in _asked(site, "alice")


def test_a_token_refused_delete_says_retention_needs_it_and_that_the_release_is_out(site):
    site.edit("a change carol releases")
    refused = site.release("--keep", "1", user="carol", trust="store")
    assert refused.code == 1, refused.out[-3000:]
    assert "as carol (TRITON_RELEASE_USERNAME/_PASSWORD) (HTTP 401)" in refused.message
    assert "needs the delete permission on team/models" in refused.message
    assert "Retention (--keep 1, the keep setting) needs that permission to delete 1.2.0" in refused.message
    assert "The release itself is out: 1.3.0 is pushed" in refused.message
    assert _releases(site.repo) == ["1.2.0", "1.3.0"] and site.repo.digest("latest") == site.repo.digest("1.3.0")


def test_a_wrong_password_is_refused_by_the_token_service_naming_the_user(site):
    refused = site.run("rollback", "--repo", site.target, "--to-version", "1.2.0", password="not-alices")
    assert refused.code == 1, refused.out[-3000:]
    assert f"token service {site.registry.tokens.realm} refused to sign in as alice" in refused.message
    assert "the username or the password (token) is wrong" in refused.message
    assert "not-alices" not in refused.out


def test_a_pull_only_token_reads_and_is_refused_the_write(site):
    before = site.repo.digest("latest")
    refused = site.run("rollback", "--repo", site.target, "--to-version", "1.2.0", user="bob")
    assert refused.code == 1, refused.out[-3000:]
    assert "refused to write tag latest of" in refused.message and "as bob" in refused.message
    assert "HTTP 401" in refused.message
    assert site.repo.digest("latest") == before
    assert _asked(site, "bob") == {"pull", "pull,push"}  # it read with pull, then asked to push, and got pull


def test_a_ca_nothing_trusts_is_its_own_refusal_naming_the_issuer_and_how_to_trust_it(site):
    before = len(site.registry.tokens.asked)
    refused = site.run("rollback", "--repo", site.target, "--to-version", "1.2.0", trust="none")
    assert refused.code == 3, refused.out[-3000:]
    message = refused.message
    assert f"The registry {site.registry.address} presented a TLS certificate issued by" in message
    assert f"CN={site.ca.name}" in message
    assert "update-ca-certificates" in message
    assert f"{site.nothing / site.registry.address}/ca.crt" in message and "registry_ca" in message
    assert "unreachable" not in message and "make stack" not in message
    assert len(site.registry.tokens.asked) == before  # no credentials went anywhere


def test_stage_a_shard_s_test_promote_and_verify_over_tls_each_with_the_token_it_needs(site, tmp_path):
    """The fan-out over the same registry: stage pushes a candidate, the shard's test pulls it by
    digest (the daemon, through its certs.d) and writes its record, promote tags it with signed
    evidence, and verify checks that evidence as bob, whose token may only pull."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    key = ec.generate_private_key(ec.SECP256R1())
    private, public = tmp_path / "signing-key.pem", tmp_path / "cosign.pub"
    private.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    public.write_bytes(
        key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    site.edit("a change staged")
    staged = site.run(
        "stage", "--to", site.target, "--base-image", BASE_IMAGE, "--shards", "1", "--signing-key", str(private)
    )
    assert staged.code == 0, staged.out[-3000:]
    candidate, version = staged.report["candidate"], staged.report["version"]
    [shard] = [s["name"] for s in staged.report["shards"]]

    tested = site.run("test", "--image", candidate, "--shard", shard, trust="certs.d", user="carol")
    assert tested.code == 0, tested.out[-3000:]

    promoted = site.run(
        "promote", "--candidate", candidate, "--version", version, "--signing-key", str(private), trust="registry_ca"
    )
    assert promoted.code == 0, promoted.out[-3000:]
    assert site.repo.digest(version) == candidate.rpartition("@")[2] == site.repo.digest("latest")

    verified = site.run("verify", f"{site.target}:{version}", "--key", str(public), user="bob")
    assert verified.code == 0, verified.out[-3000:]
    assert _asked(site, "bob") == {"pull", "pull,push"}  # verify asked pull alone: bob's earlier refusal asked push


def _doctor(site: Site, **kw) -> tuple[Outcome, dict]:
    found = site.run("doctor", "--to", site.target, "--base-image", BASE_IMAGE, "--keep", "1", **kw)
    rows = {row["name"]: row for row in found.report["steps"]["doctor"]["checks"]}
    return found, rows


def test_doctor_says_which_permission_each_user_lacks_and_a_ca_nothing_trusts(site):
    """doctor over the same registry: all green for alice; bob's pull-only token and carol's token
    without delete each named in their row; an untrusted CA in the registry row, with its fix."""
    alice, rows = _doctor(site)
    assert alice.code == 0, alice.out[-3000:]
    assert all(rows[name]["status"] == "ok" for name in ("registry", "push", "delete (keep)")), rows
    assert "as alice (TRITON_RELEASE_USERNAME/_PASSWORD)" in rows["registry"]["detail"]

    bob, rows = _doctor(site, user="bob")
    assert bob.code == 1
    assert rows["registry"]["status"] == "ok"  # bob may read
    assert rows["push"]["status"] == "problem" and "as bob" in rows["push"]["detail"]
    assert rows["delete (keep)"]["status"] == "problem"
    assert "deletes are refused for these credentials (HTTP 401)" in rows["delete (keep)"]["detail"]

    carol, rows = _doctor(site, user="carol")
    assert carol.code == 1
    assert rows["push"]["status"] == "ok" and rows["delete (keep)"]["status"] == "problem"

    untrusted, rows = _doctor(site, trust="none")
    assert untrusted.code == 1
    assert rows["registry"]["status"] == "problem"
    assert "presented a TLS certificate issued by" in rows["registry"]["detail"]
    assert "update-ca-certificates" in rows["registry"]["detail"]
    assert "push" not in rows  # nothing more is asked of a registry that cannot be reached
