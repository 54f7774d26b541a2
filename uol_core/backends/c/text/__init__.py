"""The text toolkit every C template writes with: the line writer, identifiers, the kernel
frame, expressions and the scalar vector-math helpers."""
