"""The test step's imports of other projects, run in a thread beside the steps before it
(release.import_beside): each is imported, and one that fails there raises nothing; its real
import in the step then says why."""

from __future__ import annotations

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
