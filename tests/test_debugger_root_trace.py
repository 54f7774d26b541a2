"""The Debugger's library-op trace on a server run as root whose Python lives under a folder
other users cannot enter (pyenv under a 0700 home): the sandbox drops to a uid of its own, and
the trace still runs (the interpreter's tree is bound back for that uid) or, where it cannot
be, is refused with the unreadable path and the fix."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from app.services.debugging import trace_library_op
from uol_core.runtime.sandbox_reach import first_unreadable, unreadable_message

OTHER_UID = 65534  # what a dropped uid is to the interpreter's files: neither owner nor group


def _blocked_interpreter() -> bool:
    return first_unreadable([Path(os.path.realpath(sys.base_prefix))], OTHER_UID,
                            [OTHER_UID]) is not None


@pytest.mark.skipif(os.geteuid() != 0 or not _blocked_interpreter(),
                    reason="needs a root server whose Python other users cannot read")
def test_a_library_op_traces_as_root_with_python_under_a_closed_home():
    res = trace_library_op("softmax", {"R": 4, "C": 64})
    isolation = " | ".join(res.get("sandbox", {}).get("isolation", []))
    if not res.get("ok"):  # no mount namespace to bind it back in: refused, with the fix
        assert "cannot read" in res["error"] and "chmod" in res["error"], res["error"]
        return
    assert "instead of root" in isolation
    assert "reach:" in isolation  # the closed folder covered, the interpreter bound back
    assert res["id"]


def test_the_refusal_names_the_path_the_folder_and_the_fix():
    line = unreadable_message("uid 4242", Path("/root/.pyenv/versions/3.11.7"), Path("/root"),
                              0o700)
    assert "/root is mode 0700" in line and "chmod o+x /root" in line
