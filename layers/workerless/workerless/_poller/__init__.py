"""The poller: short-poll the engine, fan jobs out to the route queues — the poll cycle, the poller
lock and its send log, the intent log, shards, the self-rescheduling tick, the routes and the
bookkeeping of what a route holds and which jobs go back (the engine calls that give a job back are
:mod:`workerless._core.settlement`'s).

Private: the Lambda entry point is :func:`workerless.entrypoints.poller`.
"""
