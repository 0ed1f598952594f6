"""The run's lifecycle outside the states of the loop: `start` (records and double texting), `queue`
(executions and the session's queue), `ending` (the one way a run ends), `cancel`, `replay`,
`reconcile` (executions that ended outside our steps), `events` (written and pushed) and
`eventlog` (read in order, with no gap and no duplicate)."""
