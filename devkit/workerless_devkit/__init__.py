"""workerless-devkit: the development tooling beside the workerless runtime.

Nothing here ships in the Lambda layer (layers/workerless builds the runtime, ``workerless``, only):

- :mod:`workerless_devkit.cli`: the ``workerless`` command (demo, local, emulate, invoke, new-handler,
  init, build, status, dlq, secrets), one module per command;
- :mod:`workerless_devkit.emulators`: the Sheptra, node-flow and StageNext emulators, served on
  127.0.0.1;
- :mod:`workerless_devkit.local`: local mode, the template's functions on moto's SQS, DynamoDB, S3
  and Parameter Store, held to AWS's rules (IAM, quotas, timings);
- :mod:`workerless_devkit.chaos`: the fault-injection harness;
- :mod:`workerless_devkit.devtools`: the developer commands' logic;
- :mod:`workerless_devkit.pytest_plugin`: the fixtures, registered when the devkit is installed.
"""

from workerless import __version__

# One version for both distributions: the devkit releases with the runtime and pins it (devkit/setup.py).
__all__ = ["__version__"]
