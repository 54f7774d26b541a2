"""What a collective costs: textbook algorithms' alpha-beta terms, their selector, and NCCL's tuner model with its constants."""
