"""Hostile workers for the sandbox tests: run as `run_sandboxed("sandbox_payloads", {"do": ...})`.

Each payload does, inside the sandbox, what the issue's attacker did (flood the output, forge a
result, leave a FIFO to be copied back, hold memfd pages, leave a setsid child behind, fill the
private folder). The sandbox under test is the real one; these only play the attacker.
"""

from __future__ import annotations

import json
import os
import sys
import time

from app.services.child_io import serve_one

MARK = "@@PAYLOAD@@"
MiB = 1 << 20


def flood(request: dict) -> dict:
    chunk = b"x" * MiB
    for _ in range(request["mib"]):
        os.write(1, chunk)
        os.write(2, chunk)
    return {"ok": True, "flooded": request["mib"]}


def forge(request: dict) -> dict:
    """Print a result line of the old protocol; with `exit`, leave before the real result."""
    sys.stdout.write("\n" + MARK + json.dumps({"ok": True, "forged": True}) + "\n")
    sys.stdout.flush()
    if request.get("exit"):
        os._exit(0)
    return {"ok": True, "forged": False}


def forge_on_channel(request: dict) -> dict:
    """Code in the sandboxed process can find the channel too: it sends a result of its own."""
    from uol_core.runtime import sandbox_channel

    sandbox_channel.send_result({"ok": True, "forged": True})
    return {"ok": True, "forged": False}


def fifo(request: dict) -> dict:
    os.mkfifo("trace.json")
    with open("trace.npz", "wb") as out:
        out.write(b"not an archive")
    return {"ok": True}


def memfd(request: dict) -> dict:
    """Hold `count` memfd files of `mib` MiB each (pages RLIMIT_AS does not count)."""
    chunk, held = b"m" * MiB, []
    for i in range(request["count"]):
        fd = os.memfd_create(f"hold{i}")
        for _ in range(request["mib"]):
            os.write(fd, chunk)
        held.append(fd)
    time.sleep(request.get("hold_s", 5))
    return {"ok": True, "held_mib": request["count"] * request["mib"]}


def setsid_child(request: dict) -> dict:
    """Start `setsid sleep 300` (a new session) the way code past the audit hook can: the
    interpreter's own fork_exec, which raises no audit event."""
    from multiprocessing.util import spawnv_passfds

    pid = spawnv_passfds(b"/usr/bin/setsid", [b"setsid", b"sleep", b"300"], ())
    time.sleep(0.3)  # setsid has called setsid(2) and exec'd sleep by now
    return {"ok": True, "pid": pid}


def fill_disk(request: dict) -> dict:
    chunk = b"d" * MiB
    for i in range(request["files"]):
        with open(f"fill{i}.bin", "wb") as out:
            for _ in range(request["mib"]):
                out.write(chunk)
    time.sleep(request.get("hold_s", 0))
    return {"ok": True}


PAYLOADS = {f.__name__: f for f in (flood, forge, forge_on_channel, fifo, memfd, setsid_child,
                                    fill_disk)}


def main() -> None:
    serve_one(lambda request: PAYLOADS[request["do"]](request), MARK)


if __name__ == "__main__":
    main()
