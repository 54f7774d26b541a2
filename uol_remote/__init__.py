"""Remote target workers: run, verify, measure, tune and profile kernels on other machines.

A worker (`uol worker --target NAME --broker redis://...`) is a Celery worker whose queue is
an HFL target's name; the coordinator (the IDE with `uol serve --broker`, or `uol tune
--targets`) signs each job with a shared secret, sends it to that queue and records what
comes back, with the worker's host facts as provenance. A C kernel job (its C comes from the
job) is built, verified and timed in a sandboxed process of its own (kernel_sandbox.py); jobs
that carry ODL or an op's name run in a child process, as a local run. Nothing here imports
the IDE.
"""

from uol_remote.client import Coordinator, JobLost, RemoteError, RemoteWorker

__all__ = ["Coordinator", "JobLost", "RemoteError", "RemoteWorker"]
