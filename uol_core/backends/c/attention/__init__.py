"""The flash-attention templates: forward and backward, their register tiles and SVE variants."""
