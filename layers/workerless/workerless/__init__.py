"""workerless: workflow-engine workers as AWS Lambda functions.

A handler function module is a few lines::

    from workerless import Job, TerminalError, job_handler

    @job_handler("charge-payment")
    def handler(job: Job) -> dict:
        if job.variables.get("amount", 0) <= 0:
            raise TerminalError("amount must be a positive number")
        return {"paymentOk": True}

A handler's configuration: ``get_settings()`` returns the function's ``WORKERLESS_*`` environment
validated, as a :class:`Settings`.
"""

from workerless._core.job import Job
from workerless._core.settings import Settings, get_settings
from workerless._handler.handler import job_handler
from workerless._version import __version__
from workerless.errors import BusinessError, TerminalError, ThrowError

__all__ = [
    "BusinessError",
    "Job",
    "Settings",
    "TerminalError",
    "ThrowError",
    "__version__",
    "get_settings",
    "job_handler",
]
