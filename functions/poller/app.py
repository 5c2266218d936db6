"""Poller Lambda: the EventBridge watchdog schedule and the self-rescheduling ticker queue invoke it.

All the logic lives in the workerless layer; this file only names the entry point for template.yaml.
"""

from workerless.entrypoints import poller as handler  # noqa: F401
