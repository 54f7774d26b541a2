"""Profilers: timing, flame trees, line hotspots, traces, rooflines, reports."""
