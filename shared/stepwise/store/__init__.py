"""DynamoDB access through pynamodb. pynamodb models stay inside this package: callers get and give
the pydantic models of stepwise.models. Every partition key starts with the tenant id."""
