"""DynamoDB access through pynamodb. pynamodb models stay inside this package: callers get and give
the pydantic models of each concept (stepwise.agents.models, stepwise.runs.models, ...). Every
partition key starts with the tenant id."""
