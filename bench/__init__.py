"""Benchmarks that print figures, never assert: `python -m bench [name ...]` (from the repo root, with
`shared/` importable). Each module measures one thing and returns a `Section`; `__main__` prints them as
a table and writes bench/results/latest.json (partial.json when only some ran).

- cold_imports    import time of every handler module in a fresh interpreter, and who imports litellm
- loop_overhead   local wall time per ReAct step with the scripted model (moto + in-process Lambdas)
- transitions     Step Functions state transitions, history events and Lambda invocations per step/call
- approvals       nothing runs while a run waits; decision → tool time; what an approved call adds
- dynamodb_ops    DynamoDB requests per step/call, by function and operation
- streaming       chunk events (DynamoDB writes) per 1,000 streamed tokens; the model step's wall time
                  (real litellm against tests/fakes/openai_server.py)
- canonical       also: a tool step's DynamoDB requests and sequential round trips, and its AWS latency
- first_token     POST …/runs → the model's first request and → a WebSocket follower's first chunk
"""
