"""The run's lifecycle outside the states of the loop: how it ends (`ending`)."""
