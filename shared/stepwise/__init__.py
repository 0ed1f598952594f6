"""Stepwise: a serverless runtime for LLM agents on AWS Step Functions."""
