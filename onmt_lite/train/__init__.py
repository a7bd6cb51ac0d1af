"""Training: the run (main.py), the trainer, optimisers and schedules, precision, several processes,
early stopping, reports and validation scores."""
