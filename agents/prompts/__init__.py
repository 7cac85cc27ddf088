"""What the model is told, as versioned text files (*.txt) and their loader (templates)."""
