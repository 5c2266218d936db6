"""Dead-letter Lambda: fails at the engine every job whose message exhausted its SQS deliveries.

All the logic lives in the workerless layer; this file only names the entry point for template.yaml.
"""

from workerless.entrypoints import deadletter as handler  # noqa: F401
