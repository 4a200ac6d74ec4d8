"""Lines a release prints where a step's result used to go unsaid or misread: a release `--keep`
keeps because a channel points at it is named with the channel; promote's release commit is told
as the version folders it adds, never as "no model changed"."""

from __future__ import annotations

import io

from triton_release.console import Console
from triton_release.registry.publish import Retention


def test_a_release_kept_for_a_channel_is_named_with_the_channel():
    out = io.StringIO()
    Console(out=out, err=out).retained(
        Retention("127.0.0.1:5000/t/m", 1, ("1.0.0",), kept_for=(("1.1.0", ("stable",)), ("1.2.0", ("a", "b"))))
    )
    printed = out.getvalue()
    assert "deleted 127.0.0.1:5000/t/m:1.0.0 (--keep 1)" in printed
    assert "kept 127.0.0.1:5000/t/m:1.1.0 beyond --keep 1: the channel stable points at it" in printed
    assert "kept 127.0.0.1:5000/t/m:1.2.0 beyond --keep 1: the channels a, b point at it" in printed
