"""Spend: usage lines and counters, budgets that pause, provider circuits."""
