"""Real collectives on this host: the gloo runtime, the DDP training demo and its compression hooks."""
