"""Sessions: the conversation that a series of runs shares."""
