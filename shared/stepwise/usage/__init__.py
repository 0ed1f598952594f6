"""Spend: what model calls and billable tools cost, counted per tenant (usage lines, counters, the
usage read API) and bounded (budgets that pause or fail a run). Provider circuits sit here too."""
