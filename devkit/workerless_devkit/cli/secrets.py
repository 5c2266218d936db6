"""``workerless secrets import``: validate an env file's engine values and store them in Secrets Manager."""

from __future__ import annotations

import argparse
from typing import Any

from workerless_devkit.cli.common import (
    EXIT_OK,
    add_aws_options,
    client,
)


def register(commands: Any) -> None:
    """Add ``workerless secrets import`` to the command parsers."""
    secrets = commands.add_parser("secrets", help="the engine's connection values in Secrets Manager")
    secrets_commands = secrets.add_subparsers(dest="secrets_command", required=True, metavar="SUBCOMMAND")
    secrets_import = secrets_commands.add_parser(
        "import",
        help="validate an env file's engine values and store them in Secrets Manager",
        description="Validate the engine's connection values in an env file (the Sheptra block as Drive prints it, "
        "node-flow's NF_* or StageNext's STAGENEXT_* keys) and create or update the secret. Prints the key names "
        "and the secret's ARN, never a value.",
    )
    secrets_import.add_argument("--env-file", default=".env", help="dotenv file (default: .env)")
    secrets_import.add_argument("--secret-name", default=None, help="secret name (default: workerless/engine)")
    add_aws_options(secrets_import)
    secrets_import.set_defaults(run=cmd_secrets_import)


def cmd_secrets_import(args: argparse.Namespace) -> int:
    from workerless_devkit.devtools.secrets_cli import DEFAULT_SECRET_NAME, import_secret, read_env_file

    values = read_env_file(args.env_file)
    name = args.secret_name or DEFAULT_SECRET_NAME
    done = import_secret(values, client(args, "secretsmanager"), secret_name=name)
    print(f"{'created' if done.created else 'updated'} secret {name} ({done.engine}): {', '.join(done.keys)}")
    if done.skipped:
        print(f"not stored (not {done.engine} keys): {', '.join(done.skipped)}")
    print(f"EngineSecretArn: {done.arn}")
    return EXIT_OK
