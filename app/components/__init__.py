"""Reusable IDE building blocks: code panes, knob panel, result cards (no callbacks here)."""
