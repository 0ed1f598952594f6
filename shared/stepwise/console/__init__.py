"""The web console: a static page in plain ES modules, served by the API function (stepwise.api.console)."""
