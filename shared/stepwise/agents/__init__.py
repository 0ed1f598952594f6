"""Agents: the model, prompt, tools and permissions a run follows."""
