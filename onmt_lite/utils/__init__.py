"""Helpers below every other part: errors, atomic file output, logging, progress, plotting, metrics,
top-k, the allocator."""
