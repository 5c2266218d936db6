"""The handler wrapper: an SQS batch of jobs in, a partial batch response out — the delivery protocol
(claim, decide, begin, run, store, report), running the handler function and validating its typed
input, the start gate and the settlement of deliveries the handler will not run.

Private: handler functions import :func:`workerless.job_handler`; nothing outside the runtime imports
this package's modules except the devkit and the tests.
"""
