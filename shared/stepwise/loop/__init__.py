"""The loop of agent_run.asl.json, one module per state: `step` (Step, with Route's decision),
`await_` (Await and AwaitAll), `done` (what the Step that gets the final answer does before Done),
`failed` (Failed); and what they share: `calls` (gating and executing a step's tool calls),
`model_call` (one call of the model) and `working` (the conversation cached per run)."""
