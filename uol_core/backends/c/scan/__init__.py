"""The scan template: a two-pass blocked parallel scan over one long index."""
