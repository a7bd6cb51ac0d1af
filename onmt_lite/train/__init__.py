"""Training: the trainer, optimisers and schedules, checkpoints, statistics."""
