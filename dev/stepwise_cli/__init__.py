"""`stepwise`, the command line: agents, runs followed live, approvals, client tools, schedules and
settings over the HTTP API (the local stack by default), and API keys for a deployed stack.

    stepwise agents create --name helper --tool-file tools.json
    stepwise run agt_... "What is the weather in Paris?"
    stepwise approve run_... --tool-call call_...

One module per command group; `render` holds the pure text rendering, `follow` the event loop.
"""

from stepwise_cli.app import main

__all__ = ["main"]
