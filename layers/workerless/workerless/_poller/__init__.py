"""The poller: short-poll the engine, fan jobs out to the route queues — the poll cycle, the poller
lock and its send log, the intent log, shards, the self-rescheduling tick, the routes and the
give-back of jobs the poller could not queue.

Private: the Lambda entry point is :func:`workerless.entrypoints.poller`.
"""
