"""The generic loop-nest template and the pieces it is built from: row loops, column
reductions, map runs, sibling loops, stencils, invariant regions and loop interchange."""
