"""Thin services the IDE pages call: compile, run, hardware, history, reports, system status."""
