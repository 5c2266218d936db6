"""The heartbeat: the tickets the poller sends per dispatched batch, and the function that keeps live
jobs' leases alive and re-sends reports left owed.

Private: the Lambda entry point is :func:`workerless.entrypoints.heartbeat`.
"""
