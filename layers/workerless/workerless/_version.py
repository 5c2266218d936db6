"""The one version of workerless: the runtime distribution's (layers/workerless/pyproject.toml reads it)
and the devkit's (devkit/setup.py reads it and pins ``workerless==`` this). A release changes this line
and CHANGELOG.md, nothing else."""

__version__ = "0.1.0"
