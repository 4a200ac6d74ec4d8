"""Backend and platform names: a typo ("pyhton", "ensamble") is refused by validate with the known
name meant, before a build and a server start would find it; a custom backend the base image holds
is named in `custom_backends`; a model.py beside a config naming another backend is a warning
saying which file Triton loads."""

from __future__ import annotations

import json

from support.models import python_config, python_model_files
from triton_release.cli import main
from triton_release.models.config.backends import BACKENDS, PLATFORMS


def run_validate(root, tmp_path, capsys, *extra: str) -> tuple[int, str, dict]:
    report = tmp_path / "report.json"
    code = main(["validate", "--model-repository", str(root), "--report", str(report), *extra])
    out = capsys.readouterr()
    return code, out.out + out.err, json.loads(report.read_text())


def test_a_misspelt_backend_is_refused_with_the_name_meant(make_repo, tmp_path, capsys):
    root = make_repo(python_model_files("a"))
    (root / "a/config.pbtxt").write_text(python_config("a").replace('backend: "python"', 'backend: "pyhton"'))
    code, printed, _ = run_validate(root, tmp_path, capsys)
    assert code == 1, printed
    assert "a/config.pbtxt:2" in printed and 'backend "pyhton"' in printed and "did you mean python?" in printed


def test_a_misspelt_platform_is_refused_with_the_name_meant(make_repo, tmp_path, capsys):
    root = make_repo(python_model_files("a"))
    (root / "a/config.pbtxt").write_text(python_config("a").replace('backend: "python"', 'platform: "onnxruntime_onx"'))
    code, printed, _ = run_validate(root, tmp_path, capsys)
    assert code == 1, printed
    assert 'platform "onnxruntime_onx"' in printed and "did you mean onnxruntime_onnx?" in printed


def test_an_unknown_backend_is_refused_until_named_in_custom_backends(make_repo, tmp_path, capsys):
    root = make_repo(python_model_files("a"))
    (root / "a/config.pbtxt").write_text(python_config("a").replace('backend: "python"', 'backend: "mybackend"'))
    code, printed, _ = run_validate(root, tmp_path, capsys)
    assert code == 1, printed
    assert "custom_backends" in printed and "/opt/tritonserver/backends/mybackend/" in printed
    settings = tmp_path / "triton-release.yaml"
    settings.write_text("custom_backends: [mybackend]\n")
    code, printed, data = run_validate(root, tmp_path, capsys, "--config", str(settings))
    assert code == 0, printed
    assert not any("mybackend" in p["message"] for p in data["steps"]["validate"]["problems"])


def test_a_near_miss_of_a_custom_backend_is_named_too(make_repo, tmp_path, capsys):
    root = make_repo(python_model_files("a"))
    (root / "a/config.pbtxt").write_text(python_config("a").replace('backend: "python"', 'backend: "mybakend"'))
    settings = tmp_path / "triton-release.yaml"
    settings.write_text("custom_backends: mybackend\n")
    code, printed, _ = run_validate(root, tmp_path, capsys, "--config", str(settings))
    assert code == 1 and "did you mean mybackend?" in printed


def test_every_backend_and_platform_triton_names_passes(make_repo, tmp_path, capsys):
    """Each name of models/config/backends.py's tables; python (which needs its model.py) and
    ensemble (which needs its steps) are validated by their own tests."""
    files = {}
    for name in BACKENDS:
        if name == "python":
            continue
        files[f"{name}_m/config.pbtxt"] = python_config(f"{name}_m").replace('backend: "python"', f'backend: "{name}"')
        files[f"{name}_m/1/weights.bin"] = b"\0"
    for name, backend in PLATFORMS.items():
        if backend is None:
            continue
        files[f"{name}_m/config.pbtxt"] = python_config(f"{name}_m").replace('backend: "python"', f'platform: "{name}"')
        files[f"{name}_m/1/weights.bin"] = b"\0"
    code, printed, data = run_validate(make_repo(files), tmp_path, capsys)
    assert not [
        p for p in data["steps"]["validate"]["problems"] if "backend" in p["message"] or "platform" in p["message"]
    ]


def test_model_py_beside_another_backend_warns_which_file_triton_loads(make_repo, tmp_path, capsys):
    root = make_repo(python_model_files("a"))
    (root / "a/config.pbtxt").write_text(python_config("a").replace('backend: "python"', 'backend: "onnxruntime"'))
    code, printed, data = run_validate(root, tmp_path, capsys)
    assert code == 0, printed
    warnings = [w["message"] for w in data["steps"]["validate"]["warnings"]]
    assert any("a/1/model.onnx" in w and "not model.py" in w and 'backend: "python"' in w for w in warnings), warnings
