"""Changing an agent safely: what-if replays of recorded runs, their comparison, and eval suites."""
