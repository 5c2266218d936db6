"""AWS adapters: the only modules in workerless that import boto3.

Clients are built lazily, once per container, with timeouts shorter than any Lambda's, and
standard-mode retries (throttling and 5xx are retried by botocore with backoff).
"""
