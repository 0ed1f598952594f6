"""The HTTP API: one Powertools resolver, a router per resource, errors mapped in one place."""
