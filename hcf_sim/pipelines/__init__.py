"""Pipeline parallelism: the schedule simulator, the shared-host model, and real torch pipeline runs with their events, pairing and elastic recovery."""
