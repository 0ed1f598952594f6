"""Webhooks on run events, signed the Standard Webhooks way and delivered by the platform.

An agent or a run names `webhook: {url, events?}`; the run keeps the one that applies (its own, else its
agent's, when it starts). Where the run's lifecycle writes an event a webhook asks for (the terminal
event in stepwise.runs.ending, approval_requested and client_tool_requested in stepwise.loop.await_),
`enqueue` records a delivery under a stable id and puts a message on WebhookQueue: nothing is sent from
the step itself. WebhookFunction (`deliver`) takes the messages, signs each attempt with the tenant's
`whsec_` secret (`keys`) and POSTs it through the SSRF guard. A failed attempt hides its message for the
next backoff (`retry`), so SQS brings it back; no Lambda sleeps. After 24 h the delivery is failed.

Receivers dedupe on `webhook-id`: it is derived from what happened (the run's ending, one interaction),
so a retried step that enqueues the same event again finds its delivery recorded and adds nothing, and
every attempt of one delivery carries the same id.
"""
