"""Heartbeat Lambda: consumes delayed heartbeat tickets and extends the leases of live jobs.

All the logic lives in the workerless layer; this file only names the entry point for template.yaml.
"""

from workerless.entrypoints import heartbeat as handler  # noqa: F401
