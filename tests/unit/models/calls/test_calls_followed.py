"""BLS calls made out of plain sight: through aliases of InferenceRequest, partials, getattr, and
in the version folder's own modules. Each is found (or, when the code cannot tell the model,
flagged and re-tested on every change), so no caller ships untested."""

from __future__ import annotations

from support.bls import aliased_caller_files, helped_caller_files, router_files
from support.models import bls_caller_files, python_model_files
from triton_release.history.changes import Changes
from triton_release.history.git import Git
from triton_release.models import calls
from triton_release.models.calls import Call
from triton_release.models.repository import Repository
from triton_release.models.validate import validate

HEAD = "import functools\nimport triton_python_backend_utils as pb_utils\n"


def named(source: str) -> list[tuple[str | None, int]]:
    return [(call.callee, call.line) for call in calls.calls_in(HEAD + source)]


# -- one file: aliases -------------------------------------------------------------------------


def test_an_import_alias_of_the_class_is_followed():
    source = "from triton_python_backend_utils import InferenceRequest as IR\nr = IR(model_name='callee', inputs=[])\n"
    assert named(source) == [("callee", 4)]


def test_a_module_alias_and_getattr_are_followed():
    source = (
        "import triton_python_backend_utils as tb\n"
        "a = tb.InferenceRequest(model_name='one', inputs=[])\n"
        "b = getattr(pb_utils, 'InferenceRequest')(model_name='two', inputs=[])\n"
        "make = getattr(tb, 'InferenceRequest')\n"
        "c = make(model_name='three')\n"
    )
    assert named(source) == [("one", 4), ("two", 5), ("three", 7)]


def test_assigned_aliases_are_followed_in_any_order_and_through_self():
    source = (
        "def later():\n"
        "    return Ask(model_name='late')\n"
        "Ask = Request\n"
        "Request, Tensor = pb_utils.InferenceRequest, pb_utils.Tensor\n"
        "class TritonPythonModel:\n"
        "    def initialize(self, args):\n"
        "        self.request = pb_utils.InferenceRequest\n"
        "    def execute(self, requests):\n"
        "        return self.request(model_name='kept', inputs=[])\n"
        "t = Tensor('INPUT0', [1])\n"
    )
    assert named(source) == [("late", 4), ("kept", 11)]


def test_a_partial_names_its_model_and_its_calls_need_not():
    source = (
        "from functools import partial as bind\n"
        "ask = functools.partial(pb_utils.InferenceRequest, model_name='first', requested_output_names=[])\n"
        "r = ask(inputs=[])\n"
        "tell = bind(pb_utils.InferenceRequest, requested_output_names=[])\n"
        "s = tell(model_name='second', inputs=[])\n"
        "t = tell(inputs=[])\n"
    )
    assert named(source) == [("first", 4), ("second", 7), (None, 8)]


def test_module_constants_and_choices_of_literals_are_read():
    source = (
        "CALLEE = 'constant'\n"
        "OTHER = 'rebound'\n"
        "def f(fast):\n"
        "    global OTHER\n"
        "    a = pb_utils.InferenceRequest(model_name=CALLEE, inputs=[])\n"
        "    b = pb_utils.InferenceRequest(model_name='fast' if fast else 'slow', inputs=[])\n"
        "    c = pb_utils.InferenceRequest(model_name=OTHER, inputs=[])\n"
    )
    assert named(source) == [("constant", 7), ("fast", 8), ("slow", 8), (None, 9)]


def test_the_class_handed_around_is_a_call_the_code_does_not_tell():
    source = (
        "def run(factory):\n"
        "    return factory(model_name='hidden')\n"
        "x = run(pb_utils.InferenceRequest)\n"
        "name = 'Inference' + 'Request'\n"
        "y = getattr(pb_utils, name)(model_name='which')\n"
        "z = pb_utils.InferenceRequest(**{'model_name': 'kw'})\n"
        "def ok(request: pb_utils.InferenceRequest) -> pb_utils.InferenceRequest:\n"
        "    assert isinstance(request, pb_utils.InferenceRequest)\n"
        "    return request\n"
    )
    assert named(source) == [(None, 5), ("which", 7), (None, 8)]
    # getattr(pb_utils, name) may be the class: a call naming its model literally still names it


# -- the version folder's modules ----------------------------------------------------------------


def test_a_helper_module_imported_relatively_or_plainly_is_read():
    helper = (
        "import triton_python_backend_utils as pb_utils\n"
        "def ask():\n    return pb_utils.InferenceRequest(model_name={!r}).exec()\n"
    )
    sources = {
        "model.py": b"from .helpers import ask\nimport plain\nfrom pkg.deep import go\n",
        "helpers.py": helper.format("relative").encode(),
        "plain.py": helper.format("plain").encode(),
        "pkg/__init__.py": b"",
        "pkg/deep.py": b"from . import sibling\n",
        "pkg/sibling.py": helper.format("transitive").encode(),
        "unused.py": helper.format("never_imported").encode(),
    }
    assert calls.folder_calls("model.py", sources) == [
        Call("relative", 3, "helpers.py"),
        Call("transitive", 3, "pkg/sibling.py"),
        Call("plain", 3, "plain.py"),
    ]


def test_an_alias_defined_in_a_helper_module_is_followed_where_it_is_used():
    sources = {
        "model.py": (
            b"from .common import Request\nimport common as c\nfrom shared import *\n"
            b"a = Request(model_name='by_name')\nb = c.Request(model_name='by_module')\n"
            b"d = ask(inputs=[])\ne = Bound(model_name='star')\n"
        ),
        "common.py": b"import triton_python_backend_utils as pb_utils\nRequest = pb_utils.InferenceRequest\n",
        "shared.py": (
            b"import functools\nfrom common import Request\n"
            b"ask = functools.partial(Request, model_name='partial')\nBound = Request\n"
        ),
    }
    assert calls.folder_calls("model.py", sources) == [
        Call("by_name", 4, "model.py"),
        Call("by_module", 5, "model.py"),
        Call("star", 7, "model.py"),
        Call("partial", 3, "shared.py"),
    ]


def test_a_module_loaded_by_a_computed_name_makes_every_module_count():
    helper = b"import triton_python_backend_utils as pb_utils\nr = pb_utils.InferenceRequest(model_name='far')\n"
    sources = {"model.py": b"import importlib\nm = importlib.import_module(NAME)\n", "plugins/far.py": helper}
    assert calls.folder_calls("model.py", sources) == [Call("far", 2, "plugins/far.py")]
    sources["model.py"] = b"exec(open('plugins/far.py').read())\n"
    assert calls.folder_calls("model.py", sources) == [Call("far", 2, "plugins/far.py")]
    literal = {"model.py": b"import importlib\nm = importlib.import_module('.near', __package__)\n", "near.py": helper}
    assert calls.folder_calls("model.py", literal) == [Call("far", 2, "near.py")]


# -- validate, loading and change detection ------------------------------------------------------


def test_validate_names_the_helper_file_and_line_of_a_missing_callee(make_repo):
    files = {**helped_caller_files("helped", "gone"), **aliased_caller_files("aliased", "away")}
    result = validate(make_repo(files))
    found = sorted((p.path.as_posix().split("model_repository/")[1], p.line, p.message) for p in result.problems)
    assert [(path, line) for path, line, _ in found] == [("aliased/1/model.py", 12), ("helped/1/helpers.py", 11)]
    assert "calls model 'away'" in found[0][2] and "calls model 'gone'" in found[1][2]


def test_validate_warns_about_a_request_the_code_does_not_tell_with_the_parameter_to_add(make_repo):
    root = make_repo({**router_files("router", "callee"), **python_model_files("callee")})
    result = validate(root)
    assert result.ok
    warning = next(w for w in result.warnings if "computed at run time" in w.message)
    assert warning.path == root / "router/1/model.py" and warning.line == 16
    assert 'key: "triton_release.depends_on"' in warning.message and "router/config.pbtxt" in warning.message
    assert "re-tested on every change of any other model" in warning.message


def test_callees_in_helpers_and_through_aliases_are_loaded_with_their_caller(make_repo):
    repo = Repository.load(
        make_repo(
            {
                **helped_caller_files("helped", "callee"),
                **python_model_files("callee"),
                **aliased_caller_files("aliased", "callee"),
                **router_files("router", "callee"),
            }
        )
    )
    assert repo.needs() == {"helped": {"callee"}, "aliased": {"callee"}}


def _released(git_repo, files: dict) -> str:
    git_repo.write(files)
    return git_repo.commit("release")


def _change(git_repo, model: str) -> None:
    path = git_repo.models / model / "1" / "model.py"
    path.write_text(path.read_text() + "# changed\n")
    git_repo.commit(f"{model} changed")


def test_changing_a_callee_retests_callers_through_helpers_and_aliases(git_repo):
    base = _released(
        git_repo,
        {
            **helped_caller_files("helped", "callee"),
            **aliased_caller_files("aliased", "callee"),
            **python_model_files("callee"),
            **python_model_files("alone"),
        },
    )
    _change(git_repo, "callee")
    found = Changes(git_repo.models).between(base, "HEAD")
    assert found.changed == ["callee"] and found.callers == ("aliased", "helped")
    assert found.to_test == ["aliased", "callee", "helped"]


def test_a_caller_the_code_does_not_tell_is_retested_on_any_change_until_declared(git_repo):
    base = _released(
        git_repo, {**router_files("router", "callee"), **python_model_files("callee"), **python_model_files("alone")}
    )
    _change(git_repo, "alone")
    assert Changes(git_repo.models).between(base, "HEAD").callers == ("router",)
    config = git_repo.models / "router" / "config.pbtxt"
    config.write_text(
        config.read_text() + 'parameters { key: "triton_release.depends_on" value: { string_value: "callee" } }\n'
    )
    declared = git_repo.commit("router declares its callee")
    _change(git_repo, "alone")
    assert Changes(git_repo.models).between(declared, "HEAD").callers == ()
    _change(git_repo, "callee")
    assert Changes(git_repo.models).between(declared, "HEAD").callers == ("router",)


def test_removing_a_callee_lists_its_callers_and_validate_refuses_it(git_repo):
    base = _released(
        git_repo,
        {
            **helped_caller_files("helped", "callee"),
            **python_model_files("callee"),
            **router_files("router", "alone"),
            **python_model_files("alone"),
        },
    )
    git_repo.remove("callee")
    git_repo.commit("callee removed")
    found = Changes(git_repo.models).between(base, "HEAD")
    assert found.removed == ["callee"] and found.callers == ("helped", "router")
    problems = validate(git_repo.models).problems
    assert [(p.path.name, p.line) for p in problems] == [("helpers.py", 11)] and "'callee'" in problems[0].message


def test_the_calls_of_many_models_are_read_with_a_fixed_number_of_git_commands(git_repo, monkeypatch):
    files = {**python_model_files("callee")}
    for i in range(40):
        files.update(helped_caller_files(f"helped{i}", "callee"))
    base = _released(git_repo, files)
    _change(git_repo, "callee")
    changes = Changes(git_repo.models)
    run, commands = Git.run, []

    def counted(self, *args, **kwargs):
        commands.append(args[0] if args[0] != "--literal-pathspecs" else args[1])
        return run(self, *args, **kwargs)

    monkeypatch.setattr(Git, "run", counted)
    head = changes.git.commit("HEAD")
    configs = changes.configs(head, sorted({path.split("/")[0] for path in files}))
    fresh = Changes(git_repo.models)
    commands.clear()
    called = fresh.calls(head, configs, {name: {1} for name in configs})
    assert called == {f"helped{i}": {"callee"} for i in range(40)}
    assert sorted(commands) == ["cat-file", "ls-tree"]  # the commit's files with their ids, then the contents
    commands.clear()
    assert changes.calls(head, configs, {name: {1} for name in configs}) == called
    assert commands == ["cat-file"]  # the commit's files were listed for its configs already
    assert Changes(git_repo.models).between(base, "HEAD").callers == tuple(sorted(f"helped{i}" for i in range(40)))


def test_the_existing_literal_caller_still_reads_as_before(make_repo):
    repo = Repository.load(make_repo({**bls_caller_files("caller", "callee"), **python_model_files("callee")}))
    assert repo.needs() == {"caller": {"callee"}}


def test_a_memo_of_another_shape_is_read_again(tmp_path, monkeypatch):
    from triton_release import cache
    from triton_release.cache import Memo

    monkeypatch.setattr(cache, "_root", tmp_path)
    monkeypatch.setattr(calls, "FOUND", Memo("bls-calls", "test"))
    source = HEAD + "r = pb_utils.InferenceRequest(model_name='kept')\n"
    for wrong in (
        {"calls": [["kept"]]},
        {"calls": [], "imports": [["import"]], "loads_any": False, "exports": {}},
        {"calls": [["x", "3"]], "imports": [], "loads_any": False, "exports": {}},
        ["not", "a", "dict"],
    ):
        calls.FOUND.put(source, wrong)
        assert calls.calls_in(source) == [Call("kept", 3)]


def test_a_version_folder_s_files_are_read_only_when_they_are_inside_the_model_folder(tmp_path):
    model = tmp_path / "repo" / "m"
    (model / "1" / "pkg").mkdir(parents=True)
    (model / "1" / "model.py").write_text("import helper\n")
    (model / "1" / "pkg" / "mod.py").write_text("x = 1\n")
    (model / "shared.py").write_text("y = 2\n")
    (tmp_path / "elsewhere.py").write_text("secret = 3\n")
    (model / "1" / "helper.py").symlink_to(model / "shared.py")
    (model / "1" / "leak.py").symlink_to(tmp_path / "elsewhere.py")
    (model / "1" / "pkg" / "up.py").symlink_to(tmp_path / "elsewhere.py")
    (model / "1" / "sub").mkdir()
    (model / "1" / "linked").symlink_to(model / "1" / "pkg", target_is_directory=True)
    files = calls.version_sources(model, 1)
    assert files["model.py"] == b"import helper\n" and files["pkg/mod.py"] == b"x = 1\n"
    assert files["helper.py"] == b"y = 2\n" and files["linked/mod.py"] == b"x = 1\n"  # links kept inside
    for name in ("leak.py", "pkg/up.py", "numpy.py", "sub", "pkg", "../shared.py/x", "/etc/passwd", "pkg/mod\0.py"):
        assert name not in files, name
    assert "../shared.py" in files  # a model file named past its version folder, still inside the model


def test_serving_a_few_models_reads_the_code_of_those_few(make_repo, monkeypatch):
    from triton_release.models import repository, suite

    files = {**python_model_files("callee"), **bls_caller_files("caller", "callee")}
    for i in range(20):
        files.update(python_model_files(f"other{i}"))
    repo = Repository.load(make_repo(files))
    read, version_calls = [], repository.version_calls
    monkeypatch.setattr(
        repository, "version_calls", lambda folder, *a: read.append(folder.name) or version_calls(folder, *a)
    )
    assert suite.models_to_load(repo, ["caller"]) == {"caller": 1, "callee": 1}
    assert sorted(read) == ["callee", "caller"]
    assert dict(repo.needs()) == {"caller": {"callee"}}  # asked for all: every model's, each once
    assert len(read) == 22
