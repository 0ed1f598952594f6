"""The run's lifecycle outside the states of the loop: `start` (records and double texting), `queue`
(executions and the session's queue), `ending` (the one way a run ends), `cancel`, `replay`,
`reconcile` (executions that ended outside our steps)."""
