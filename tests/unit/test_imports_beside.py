"""The test step's imports of other projects, run in a thread beside the steps before it
(release.import_beside): each is imported, and one that fails there raises nothing; its real
import in the step then says why."""

from __future__ import annotations

import subprocess
import sys

from triton_release.release import TEST_IMPORTS, import_beside


def test_the_modules_are_imported_in_a_thread_and_a_failing_one_is_left_for_its_real_import(monkeypatch, tmp_path):
    (tmp_path / "beside_ok.py").write_text("VALUE = 1\n")
    (tmp_path / "beside_broken.py").write_text("raise ImportError('broken on purpose')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in ("beside_ok", "beside_broken"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    thread = import_beside(["beside_broken", "beside_ok"])
    assert thread.daemon  # never holds the process at its exit
    thread.join(timeout=10)
    assert sys.modules["beside_ok"].VALUE == 1
    assert "beside_broken" not in sys.modules  # its real import raises again, saying why


def test_only_other_projects_are_imported_beside_the_steps():
    assert all(not name.startswith("triton_release") for name in TEST_IMPORTS)


def test_the_imports_beside_leave_gevents_default_loop_to_the_main_thread():
    """The HTTP client waits in gevent's hub; only the default loop checks for signals, and the
    first thread to ask for a hub takes it. After the imports beside, the main thread's is it."""
    script = (
        "from triton_release.release import TEST_IMPORTS, import_beside\n"
        "import_beside(TEST_IMPORTS).join()\n"
        "import tritonclient.http, gevent.hub\n"
        "assert gevent.hub.get_hub().loop.default\n"
    )
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr[-2000:]
