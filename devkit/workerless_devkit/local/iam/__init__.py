"""Local mode's IAM check: each function's AWS calls held to its own role, as AWS holds them.

- :mod:`~workerless_devkit.local.iam.roles`: every function's role, rendered from the template by the SAM
  translator (offline) and resolved to the ARNs local mode creates;
- :mod:`~workerless_devkit.local.iam.policy`: IAM's evaluation of identity-based policies;
- :mod:`~workerless_devkit.local.iam.calls`: what AWS authorises for one API call (actions, resources);
- :mod:`~workerless_devkit.local.iam.enforce`: the botocore hooks, AWS's refusal, the record of what was
  allowed, and the start-up checks of event sources and log writes.

See docs/assumptions.md, "Local mode: IAM".
"""
