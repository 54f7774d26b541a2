"""Plans: what an op is, recognised once from the IR, rendered by every backend.

A plan names the tensors, indices and facts a kernel template needs (for attention: Q, K, V,
the score reduction, a causal bound, the row statistics written for the backward). Each
backend's template takes a plan or declines it with its own limits (the C flash kernel reads
only f32 in the canonical layout; the Triton one any float layout but not the split form), so
two languages never disagree about what an op *is*, only about what they can emit.
"""

from uol_core.plans.attention import AttentionPlan, attention_plan
from uol_core.plans.rows import RowSplit, SoftmaxRows, row_split, softmax_rows

__all__ = ["AttentionPlan", "RowSplit", "SoftmaxRows", "attention_plan", "row_split",
           "softmax_rows"]
