"""Following a run live over an API Gateway WebSocket API, with no Lambda running while a client waits.

`POST /v1/runs/{run_id}/follow?after=N` hands out a signed, single-use `wss://` URL (tokens.py). The
WebSocket API's authorizer admits it once (the use is a conditional write), `$connect` records the
connection as one of the run's followers with its cursor at N, and a one-off asynchronous invocation
sends the backlog once API Gateway has opened the socket (a connection cannot be posted to before its
`$connect` returns). From then on every process that appends events posts them to the run's followers
(delivery.py), and the socket is closed after the terminal event.

No gap, no duplicate, in order: each follower has one cursor (`sent`) and one lease. Only the lease
holder sends, the contiguous events after the cursor (stepwise.runs.eventlog's rules), then moves the cursor
and releases the lease, and then looks at the log once more: a writer that found the lease taken wrote
its events before it tried, so that last look sees them.
"""
