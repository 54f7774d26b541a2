"""Worker process of the Profiler page: profile one operator (compile + run, timings, callgrind lines).

Runs as `python -m app.services.profile_child` with a JSON request on stdin; kernels never run in
the server process.

Deferred imports: a child process loads only the engine its request needs, so it starts fast.
"""

from __future__ import annotations

from app.services.child_io import serve_one

MARK = "@@PROFILE@@"


def profile(request: dict) -> dict:
    """The operator report (flame, hotspots, timings, roofline) plus a torch reference timeline."""
    from profilers.report import operator_report

    report = operator_report(request["op"], request["sizes"], request.get("target", "host"),
                             repeats=int(request.get("repeats", 3)), hotspots=True)
    try:
        from profilers.traces import torch_reference_timeline

        report["timeline"] = torch_reference_timeline(request["op"], request["sizes"],
                                                      repeats=2).to_dict()
    except Exception as exc:  # the timeline is an extra; the page says why it is missing
        report["notes"].append(f"no timeline: {type(exc).__name__}: {exc}")
    return report


def main() -> None:
    """Read the request, profile, print the marked JSON report (or the error)."""
    serve_one(profile, MARK, "report")


if __name__ == "__main__":
    main()
