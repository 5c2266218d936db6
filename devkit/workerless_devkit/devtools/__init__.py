"""Developer tools behind the ``workerless`` command's daily-loop subcommands.

- :mod:`~workerless_devkit.devtools.scaffold`: ``workerless new-handler TYPE`` (files + template.yaml edit);
- :mod:`~workerless_devkit.devtools.invoke`: ``workerless invoke TYPE`` (one handler, one made-up job);
- :mod:`~workerless_devkit.devtools.secrets`: ``workerless secrets import`` (validate, store in Secrets Manager);
- :mod:`~workerless_devkit.devtools.status`: ``workerless status`` (per route: depth, in flight, DLQ, last poll);
- :mod:`~workerless_devkit.devtools.dlq`: ``workerless dlq show|redrive`` (the job dead-letter queue).

These run on a developer's machine, never in Lambda; those that talk to AWS import boto3 lazily,
inside the functions that need it, and take their clients as arguments so tests hand them moto's.
"""
