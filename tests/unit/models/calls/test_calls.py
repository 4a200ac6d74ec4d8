"""Models calling models (BLS): callees read from the code's syntax tree or declared in the
config, loaded with their callers, re-testing their callers, and checked by validate."""

from __future__ import annotations

from support.models import bls_caller_files, python_model_files
from triton_release.history.changes import Changes
from triton_release.models import calls
from triton_release.models.repository import Repository
from triton_release.models.suite import models_to_load
from triton_release.models.validate import validate

DECLARED = '\nparameters { key: "triton_release.depends_on" value: { string_value: "callee, other" } }\n'


def test_callees_are_read_from_the_syntax_tree():
    source = (
        "import triton_python_backend_utils as pb_utils\n"
        "a = pb_utils.InferenceRequest(model_name='add_sub', inputs=[], requested_output_names=[])\n"
        "b = InferenceRequest('request-7', 0, [], [], 'positional')\n"
        "c = pb_utils.InferenceRequest(model_name=f'm_{x}', inputs=[], requested_output_names=[])\n"
        "'InferenceRequest(model_name=\"in_a_string\")'\n"
        "d = InferenceRequest('request-7', [], [])\n"
    )
    # model_name is the fifth positional argument (request_id, correlation_id, inputs, outputs, model_name):
    # a request id is no model's name
    assert calls.calls_in(source) == [
        calls.Call("add_sub", 2),
        calls.Call("positional", 3),
        calls.Call(None, 4),
        calls.Call(None, 6),
    ]
    assert calls.calls_in("def broken(:\n") == []


def test_a_caller_needs_its_callees_loaded_named_or_declared(make_repo):
    files = {
        **bls_caller_files("caller", "callee"),
        **python_model_files("callee"),
        **python_model_files("other"),
        **bls_caller_files("dynamic", "other", computed=True),
    }
    files["dynamic/config.pbtxt"] += (
        '\nparameters { key: "triton_release.depends_on" value: { string_value: "other" } }\n'
    )
    repo = Repository.load(make_repo(files))
    assert repo.needs() == {"caller": {"callee"}, "dynamic": {"other"}}
    assert set(models_to_load(repo, ["caller", "dynamic"])) == {"caller", "callee", "dynamic", "other"}


def test_validate_refuses_an_unknown_callee_and_warns_about_a_computed_one(make_repo):
    files = {
        **bls_caller_files("caller", "nowhere"),
        **bls_caller_files("dynamic", "callee", computed=True),
        **python_model_files("callee"),
    }
    result = validate(make_repo(files))
    assert len(result.problems) == 1 and "calls model 'nowhere'" in result.problems[0].message
    assert str(result.problems[0].path).endswith("caller/1/model.py") and result.problems[0].line == 11
    warning = next(w for w in result.warnings if "computed at run time" in w.message)
    assert str(warning.path).endswith("dynamic/1/model.py") and warning.line == 11
    assert "triton_release.depends_on" in warning.message


def test_a_declaration_silences_the_warning_and_names_must_exist(make_repo):
    files = {**bls_caller_files("dynamic", "callee", computed=True), **python_model_files("callee")}
    files["dynamic/config.pbtxt"] += DECLARED
    result = validate(make_repo(files))
    assert not any("computed at run time" in w.message for w in result.warnings)
    assert len(result.problems) == 1 and "names model 'other'" in result.problems[0].message
    assert result.problems[0].line == 7


def test_a_changed_callee_retests_its_callers_without_bumping_them(git_repo):
    git_repo.write(
        {**bls_caller_files("caller", "callee"), **python_model_files("callee"), **python_model_files("alone")}
    )
    base = git_repo.commit("three models")
    model_py = git_repo.models / "callee" / "1" / "model.py"
    model_py.write_text(model_py.read_text() + "# changed\n")
    git_repo.commit("callee changed")
    found = Changes(git_repo.models).between(base, "HEAD")
    assert found.changed == ["callee"] and found.callers == ("caller",) and found.ensembles == ()
    assert found.to_test == ["callee", "caller"]
    assert found.to_json()["callers"] == ["caller"]
