"""Small helpers shared by every command: errors, atomic file output, logging."""
