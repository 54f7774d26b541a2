"""Remote target workers: run, verify, measure, tune and profile kernels on other machines.

A worker (`uol worker --target NAME --broker redis://...`) is a Celery worker whose queue is
an HFL target's name; the coordinator (the IDE with `uol serve --broker`, or `uol tune
--targets`) signs each job with a shared secret, sends it to that queue and records what
comes back, with the worker's host facts as provenance. The worker runs every job through
the same sandboxed worker process as a local run. Nothing here imports the IDE.
"""

from uol_remote.client import Coordinator, JobLost, RemoteError, RemoteWorker

__all__ = ["Coordinator", "JobLost", "RemoteError", "RemoteWorker"]
