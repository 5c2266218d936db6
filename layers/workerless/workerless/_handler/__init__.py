"""The handler wrapper: an SQS batch of jobs in, a partial batch response out — the delivery protocol
(claim, decide, begin, run, store, report), running the handler function and validating its typed
input, and the start gate. The engine calls that settle a delivery the handler will not run are
:mod:`workerless._core.settlement`'s (the poller and the dead-letter function make them too).

Private: handler functions import :func:`workerless.job_handler`; nothing outside the runtime imports
this package's modules except the devkit and the tests.
"""
