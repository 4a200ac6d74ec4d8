"""Layer tars and their order, without Docker."""

from __future__ import annotations

import io
import os

from triton_release.image.layers import Layer, order_layers, write_layer_tar


def layer(name: str, digest: str) -> Layer:
    return Layer(name, name.split(".")[0], None, (), digest)


def test_unchanged_layers_keep_the_previous_order_and_changed_ones_go_last():
    previous = [["b.files.tar", "1"], ["a.v1.tar", "2"], ["c.v1.tar", "3"]]
    now = [layer("a.v1.tar", "2"), layer("a.v2.tar", "9"), layer("b.files.tar", "1"), layer("c.v1.tar", "4")]
    assert [x.name for x in order_layers(now, previous)] == ["b.files.tar", "a.v1.tar", "a.v2.tar", "c.v1.tar"]


def test_the_same_files_give_the_same_tar_whatever_their_times(tmp_path):
    (tmp_path / "m" / "1").mkdir(parents=True)
    model_py = tmp_path / "m" / "1" / "model.py"
    model_py.write_text("x = 1\n")
    entries = {"models/m/1": model_py.parent, "models/m/1/model.py": model_py}
    first = write_layer_tar(io.BytesIO(), entries)
    os.utime(model_py, (1, 1))
    assert write_layer_tar(io.BytesIO(), entries) == first
    model_py.write_text("x = 2\n")
    assert write_layer_tar(io.BytesIO(), entries) != first
