"""AWS adapters: the only modules in workerless that import boto3.

Clients are built lazily, once per container, with timeouts shorter than any Lambda's, and
standard-mode retries (throttling and 5xx are retried by botocore with backoff).
"""

# The adapters are its modules, named here rather than imported: ``import workerless.aws.clients``
# must not load boto3's DynamoDB, SQS, S3, SSM and Secrets Manager adapters at a cold start that
# needs one of them (bench/cold_start.py measures each function's import path).
__all__ = ["clients", "dynamo", "items", "parameters", "payloads", "secrets", "sqs"]
