"""The core: what every part of the pipeline shares and nothing of AWS or an engine's wire — the
records that travel (model, the job record, the claim check's pointer), lease semantics, retry
policies, the ports the pipeline's parts need, settings, SQS batches, the job a handler receives, and
the engine calls that report or settle a job (report, settlement) the handler, poller and dead letter share.

Private: import what a handler needs from :mod:`workerless`; the pipeline's parts import from these
modules directly. The layering test (tests/unit/runtime/test_runtime_structure.py) keeps this package below
the adapters (:mod:`workerless.aws`, :mod:`workerless.engines`) and the parts above them.
"""
