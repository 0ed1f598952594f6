"""Protocol doors: thin facades that speak other protocols over the same Stepwise runs."""
