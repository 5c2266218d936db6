"""Chaos machinery: prove workerless's delivery promise with numbers, under faults, for every engine.

``python -m workerless_devkit.chaos`` (``make chaos``) runs template.yaml's topology in local mode against an
engine emulator while injecting faults at every point where they can hurt, and prints the figures:
jobs, faults injected by kind, jobs lost, duplicate completed side effects for one engine attempt,
stale writes accepted, jobs stuck past their deadline, mean and worst time to recover.

- :mod:`workerless_devkit.chaos.plan`: the fault kinds, a :class:`FaultPlan` (a rate per kind, a seed) and
  the :class:`Recorder` of what was injected; :class:`SimulatedCrash` (process death).
- :mod:`workerless_devkit.chaos.ledger`: the side-effect ledger the wrapped handlers write, keyed by the
  job's idempotency key, so a second run of one engine attempt shows up.
- :mod:`workerless_devkit.chaos.inject`: botocore event hooks (DynamoDB / SQS throttles and failures, SQS
  duplicates, late heartbeat tickets, a poller death before the ticket) and the engine proxy
  (emulator faults over its admin API, poller death after activation, death after the store).
- :mod:`workerless_devkit.chaos.topology`: :class:`ChaosTopology`, a LocalTopology whose functions are
  wrapped (process death, Lambda timeout, slow or dead heartbeat, visibility-timeout redelivery).
- :mod:`workerless_devkit.chaos.run`: one run against one engine emulator, and its :class:`Figures`.

Nothing here is imported by the pipeline; it is test machinery that ships with the library so that
``make chaos`` needs no test tree.
"""

from __future__ import annotations

from workerless_devkit.chaos.plan import Fault, FaultPlan, Recorder, SimulatedCrash

__all__ = ["Fault", "FaultPlan", "Recorder", "SimulatedCrash"]
