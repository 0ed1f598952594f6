"""Triggers tenants set up themselves: a trigger starts a target (an agent; a workflow once workflows
merge) when an event reaches it.

`type` says where events come from. `webhook` is served now: the trigger gets a public URL
`POST /v1/triggers/{trigger_id}/in` and a signing secret (shown once, rotatable with an overlap).
`gmail`, `outlook` and `ses` are accepted by the model and answer 422 `trigger_type_unavailable`
until their intake lands; they plug into the same deliveries and worker (an intake records a delivery
with its dedupe key and enqueues it, the worker starts the run).

The intake (`intake`) verifies the request (`verify`: standard-webhooks, github, stripe, hmac-sha256),
records the delivery together with its dedupe key in one transaction, enqueues it on TriggerQueue and
answers 202; a repeat of a dedupe key answers 200 `{deduplicated: true}`. The worker (`worker`) renders
the trigger's templates (`templates`) over the event and starts the target (`targets.start`). The run
id is derived from the trigger and the dedupe key, so a redelivered message, or a crash between intake
and start, makes exactly one run. Runs carry `trigger: "<type>"` and the trigger's id; their effect
ledger intent is the delivery (`<type>:<trigger id>/<dedupe key>`), as a schedule's is its tick.
"""
