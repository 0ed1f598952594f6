"""What every other package stands on: errors, ids, configuration, AWS clients, schemas and safe
JSON, masking, credentials, logs, metrics and traces. It imports nothing else of stepwise."""
