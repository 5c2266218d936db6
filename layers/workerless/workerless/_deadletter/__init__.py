"""The dead-letter function: a job whose handler kept failing at the AWS level is failed at the
engine (see :mod:`workerless._deadletter.deadletter`).

Private: the Lambda entry point is :func:`workerless.entrypoints.deadletter`.
"""
