"""Evaluation at scale: harnesses, batch summaries, the result cache, cluster batches."""
