"""Tools an agent may call: their declarations for the model and their execution."""
