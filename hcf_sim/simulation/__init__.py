"""Time on a fabric: the flow-level simulator, collective schedules as phases, NCCL's pick timed by flows, compute/communication overlap."""
