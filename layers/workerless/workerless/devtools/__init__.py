"""Developer tools behind the ``workerless`` command's daily-loop subcommands.

- :mod:`~workerless.devtools.scaffold`: ``workerless new-handler TYPE`` (files + template.yaml edit);
- :mod:`~workerless.devtools.invoke`: ``workerless invoke TYPE`` (one handler, one made-up job);
- :mod:`~workerless.devtools.secrets`: ``workerless secrets import`` (validate, store in Secrets Manager);
- :mod:`~workerless.devtools.status`: ``workerless status`` (per route: depth, in flight, DLQ, last poll);
- :mod:`~workerless.devtools.dlq`: ``workerless dlq show|redrive`` (the job dead-letter queue).

These run on a developer's machine, never in Lambda; those that talk to AWS import boto3 lazily,
inside the functions that need it, and take their clients as arguments so tests hand them moto's.
"""
