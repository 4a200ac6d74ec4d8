"""The command line: flags map onto settings by declaration only; one word per concept."""

from __future__ import annotations

import argparse
import re
import sys

import pytest

from support.models import python_model_files, write_tree
from support.reports import parse_report, read_report
from triton_release.cli import main
from triton_release.cli.common import flag_default
from triton_release.cli.main import parser


def run(tmp_path, monkeypatch, *argv, config: str | None = None) -> tuple[int, dict]:
    monkeypatch.chdir(tmp_path)
    if config is not None:
        (tmp_path / "triton-release.yaml").write_text(config)
    report = tmp_path / "report.json"
    code = main([*argv, "--report", str(report)], env={"HOME": str(tmp_path)})
    return code, read_report(report) if report.exists() else {}


def test_push_image_is_never_taken_for_the_registry_repository(tmp_path, monkeypatch):
    """With `image:` (now `repository:`) in the settings file, --image stays the local image."""
    code, report = run(
        tmp_path,
        monkeypatch,
        "push",
        "--image",
        "models:candidate",
        "--version",
        "01.0.0",
        config="image: 127.0.0.1:9/team/models\n",
    )
    assert code == 2
    assert "--version '01.0.0'" in report["error"]["message"]  # refused for the version, not the image


def test_the_old_image_setting_still_works_with_a_warning(tmp_path, monkeypatch, capsys):
    code, report = run(
        tmp_path, monkeypatch, "rollback", "--to-version", "1.0.0", config="image: 127.0.0.1:9/team/models\n"
    )
    assert code == 3  # it reached for the registry at 127.0.0.1:9: the setting was used
    assert "'image' is deprecated; call it 'repository'" in capsys.readouterr().out


def test_usage_errors_exit_2_with_a_report(tmp_path, monkeypatch):
    code, report = run(tmp_path, monkeypatch, "release", "--to", "127.0.0.1:9/x/y", "--keep", "0")
    assert code == 2 and "keep" in report["error"]["message"]
    code, report = run(tmp_path, monkeypatch, "release", "--load-timeout", "-1")
    assert code == 2


def test_version_and_validate_import_no_docker_grpc_or_pytest(tmp_path):
    import subprocess

    probe = (
        "import sys; from triton_release.cli import main; main(['validate', '--model-repository', sys.argv[1]]); "
        "print(sorted(m for m in ('docker', 'grpc', 'pytest', 'tritonclient.grpc') if m in sys.modules))"
    )
    write_tree(tmp_path / "models", python_model_files("a"))
    done = subprocess.run([sys.executable, "-c", probe, str(tmp_path / "models")], capture_output=True, text=True)
    assert done.stdout.strip().splitlines()[-1] == "[]", done.stdout + done.stderr


def test_a_channel_may_not_name_a_release_a_moving_or_a_provenance_tag(tmp_path, monkeypatch):
    for channel in ("1.0.0", "1.1", "1", "sha-0123456789ab", "Bad Tag!"):
        code, report = run(
            tmp_path,
            monkeypatch,
            "rollback",
            "--repo",
            "127.0.0.1:9/x/y",
            "--to-version",
            "1.0.0",
            "--channel",
            channel,
        )
        assert code == 2, (channel, report)
        assert repr(channel) in report["error"]["message"]


def test_a_model_version_of_0_is_refused_as_such(tmp_path, monkeypatch):
    code, report = run(
        tmp_path, monkeypatch, "rollback", "--server", "127.0.0.1:9", "--model", "a", "--to-model-version", "0"
    )
    assert code == 2 and "versions start at 1" in report["error"]["message"]


def test_an_upper_case_repository_flag_is_lower_cased_with_a_notice(tmp_path, monkeypatch, capsys):
    code, report = run(tmp_path, monkeypatch, "rollback", "--repo", "127.0.0.1:9/MyOrg/Models", "--to-version", "1.0.0")
    assert code == 3  # accepted, and looked for at 127.0.0.1:9 (nothing listens there)
    out = capsys.readouterr().out
    assert (
        "warning: registry repository 127.0.0.1:9/MyOrg/Models lower-cased to 127.0.0.1:9/myorg/models "
        "(Docker refuses upper case)"
    ) in out.splitlines()
    code, report = run(
        tmp_path, monkeypatch, "push", "--image", "m:c", "--to", "127.0.0.1:9/A/B", "--version", "01.0.0"
    )
    assert code == 2 and "--version '01.0.0'" in report["error"]["message"]  # refused for the version only
    assert "lower-cased to 127.0.0.1:9/a/b" in capsys.readouterr().out


def test_inside_actions_the_notice_is_a_warning_annotation(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    code = main(
        ["rollback", "--repo", "127.0.0.1:9/MyOrg/Models", "--to-version", "1.0.0"],
        env={"HOME": str(tmp_path), "GITHUB_ACTIONS": "true"},
    )
    assert code == 3
    assert (
        "::warning::registry repository 127.0.0.1:9/MyOrg/Models lower-cased to 127.0.0.1:9/myorg/models "
        "(Docker refuses upper case)"
    ) in capsys.readouterr().out.splitlines()


def test_global_flags_go_before_or_after_the_command(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    write_tree(tmp_path / "models", python_model_files("a"))
    (tmp_path / "s.yaml").write_text("channel: stable\n")
    env = {"HOME": str(tmp_path)}
    for argv in (
        ["--json", "validate", "--model-repository", "models"],
        ["validate", "--json", "--model-repository", "models"],
        ["--model-repository", "models", "--config", "s.yaml", "--json", "validate"],
        ["--debug", "validate", "--model-repository", "models", "--json"],
    ):
        assert main(argv, env=env) == 0, argv
        captured = capsys.readouterr()
        assert parse_report(captured.out)["command"] == "validate", argv
        assert "no problems" in captured.err, argv
    assert main(["--report", "r1.json", "validate", "--model-repository", "models"], env=env) == 0
    assert main(["validate", "--model-repository", "models", "--report", "r2.json"], env=env) == 0
    assert read_report(tmp_path / "r1.json")["ok"] and read_report(tmp_path / "r2.json")["ok"]


def test_a_flag_after_the_command_wins_over_the_same_flag_before_it():
    from triton_release.cli.main import parser

    args = parser().parse_args(["--model-repository", "a", "--config", "x.yaml", "validate", "--model-repository", "b"])
    assert (getattr(args, "setting.model_repository"), args.config, args.json, args.report) == (
        "b",
        "x.yaml",
        False,
        None,
    )
    args = parser().parse_args(["validate"])
    assert (args.config, args.report, args.json, args.debug) == (None, None, False, False)
    assert not hasattr(args, "setting.model_repository")  # not given: the settings file or the default decides


def test_version_still_works(capsys):
    import pytest

    with pytest.raises(SystemExit) as done:
        main(["--version"], env={})
    assert done.value.code == 0 and capsys.readouterr().out.startswith("triton-release ")


def test_a_lone_registry_username_in_the_environment_is_a_warning_naming_the_missing_password(
    tmp_path, monkeypatch, capsys
):
    monkeypatch.chdir(tmp_path)
    env = {"HOME": str(tmp_path), "TRITON_RELEASE_USERNAME": "bot"}
    assert main(["rollback", "--to-version", "1.0.0"], env=env) == 2  # no repository given
    assert "warning: TRITON_RELEASE_USERNAME is given without TRITON_RELEASE_PASSWORD" in capsys.readouterr().out


def test_help_shows_each_flags_default_as_the_cli_reference_does(capsys):
    """`triton-release COMMAND --help` gives the default the reference's default column gives: the
    setting's for a flag that sets one, else the flag's own; none where there is none."""
    top = parser()
    [sub] = [a for a in top._actions if isinstance(a, argparse._SubParsersAction)]
    for name, command in [("", top), *sub.choices.items()]:
        shown = " ".join(command.format_help().split())
        assert "(default: None)" not in shown and "(default: False)" not in shown, name
        for action in command._actions:
            default = flag_default(action)
            if default is None or action.required or "default" in (action.help or ""):
                continue
            help_line = " ".join(f"{action.help} (default: {default})".split())
            assert help_line in shown, f"triton-release {name} --help: {action.option_strings[0]} without its default"
    with pytest.raises(SystemExit):
        main(["release", "--help"], env={})
    printed = " ".join(capsys.readouterr().out.split())
    assert "(default: 300)" in printed and "(default: nvcr.io/nvidia/tritonserver:26.07-py3)" in printed
    assert re.search(r"--head REF the commit to release \(default HEAD\) --to", printed)  # said once, by its help


@pytest.mark.parametrize(
    ("argv", "hint"),
    [
        (["valdate"], "(did you mean validate?)"),
        (["validate", "--modle-repository", "x"], "(did you mean --model-repository?)"),
        (["changed", "--bsae", "v1.0.0"], "(did you mean --base?)"),
        (["changed", "--hed=HEAD"], "(did you mean --head?)"),
    ],
)
def test_an_unknown_command_or_flag_gets_the_closest_one(capsys, argv, hint):
    assert main(argv, env={}) == 2
    err = capsys.readouterr().err
    assert hint in err and "See `triton-release" in err, err


def test_record_of_an_unknown_model_is_a_usage_error_naming_the_known_ones(tmp_path, monkeypatch, capsys):
    from support.models import python_model_files, write_tree

    write_tree(tmp_path / "model_repository", {**python_model_files("add_sub"), **python_model_files("score")})
    code, report = run(tmp_path, monkeypatch, "record", "--image", "models:candidate", "--models", "nosuch,add_sb")
    message = report["error"]["message"]
    assert code == 2, message
    assert "--models names 'nosuch', 'add_sb', which are no models in model_repository" in message
    assert "(its models: add_sub, score; did you mean 'add_sub'?)" in message
    assert "bug" not in capsys.readouterr().err


@pytest.mark.parametrize("flags", [["--json"], []], ids=["--json", "human lines"])
def test_a_closed_stdout_is_no_error_and_no_traceback(git_repo, tmp_path, flags):
    """`triton-release changed --json | true`: a real process whose stdout's reader is gone before it
    writes. It does its work, writes its report file, exits 0, and prints no traceback."""
    import os
    import subprocess

    from support.models import python_model_files

    git_repo.write(python_model_files("a"))
    git_repo.commit("release 1.0.0")
    git_repo.git("tag", "v1.0.0")
    git_repo.write({"a/1/model.py": (git_repo.models / "a/1/model.py").read_text() + "# faster\n"})
    git_repo.commit("a: faster")
    read, write = os.pipe()
    os.close(read)  # the reader is gone: every write to the pipe fails (EPIPE)
    report = tmp_path / "report.json"
    env = {**os.environ, "HOME": str(tmp_path), "PYTHONPATH": os.pathsep.join(sys.path)}
    try:
        process = subprocess.run(
            [sys.executable, "-m", "triton_release", "changed", *flags, "--report", str(report)],
            cwd=git_repo.root,
            stdout=write,
            stderr=subprocess.PIPE,
            env=env,
            timeout=120,
        )
    finally:
        os.close(write)
    errors = process.stderr.decode()
    assert process.returncode == 0, errors
    assert "Traceback" not in errors and "BrokenPipeError" not in errors and "Exception ignored" not in errors, errors
    assert read_report(report)["steps"]["changed"]["changes"]["changed"] == ["a"]


def _run_validate(root, tmp_path, *argv: str, env: dict | None = None, close_stdout: bool = False):
    """`triton-release validate` as a real process in `root`; `close_stdout`: started with its
    stdout closed (`>&-`), not a pipe: Python's sys.stdout is then None."""
    import os
    import subprocess

    environment = {**os.environ, "HOME": str(tmp_path), "PYTHONPATH": os.pathsep.join(sys.path), **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "triton_release", "validate", *argv],
        cwd=root,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=environment,
        timeout=120,
        preexec_fn=(lambda: os.close(1)) if close_stdout else None,  # noqa: PLW1509 (a test's child alone)
    )


@pytest.mark.parametrize("flags", [["--json"], []], ids=["--json", "human lines"])
def test_a_stdout_closed_before_the_start_is_no_error_and_no_traceback(tmp_path, flags):
    """`triton-release validate >&-` on a passing repository: exit 0 as its report says, not 1 with
    AttributeError: 'NoneType' object has no attribute 'flush'."""
    from support.models import python_model_files, write_tree

    write_tree(tmp_path / "model_repository", python_model_files("a"))
    report = tmp_path / "report.json"
    process = _run_validate(tmp_path, tmp_path, *flags, "--report", str(report), close_stdout=True)
    errors = process.stderr.decode()
    assert process.returncode == 0, errors
    assert "Traceback" not in errors and "AttributeError" not in errors, errors
    assert read_report(report)["ok"] is True


def test_an_unwritable_cache_folder_drops_the_memos_without_a_traceback(tmp_path):
    """TRITON_RELEASE_CACHE=/proc/nope/cache: validate needs nothing kept there; the memos it would
    save at exit are dropped, never three tracebacks of an atexit callback."""
    from support.models import python_model_files, write_tree

    write_tree(tmp_path / "model_repository", {**python_model_files("a"), **python_model_files("b")})
    process = _run_validate(tmp_path, tmp_path, env={"TRITON_RELEASE_CACHE": "/proc/nope/cache"})
    errors = process.stderr.decode()
    assert process.returncode == 0, errors
    assert "Traceback" not in errors and "Exception ignored" not in errors and "Cannot write" not in errors, errors
