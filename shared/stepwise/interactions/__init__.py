"""Interactions: the pauses of a run (approvals, client tools, delegations), and the rules that bind
an answer to what was asked."""
