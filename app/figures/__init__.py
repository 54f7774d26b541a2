"""IDE-only plotly figure builders (pure: data in, Figure out); shared ones live in profilers."""
