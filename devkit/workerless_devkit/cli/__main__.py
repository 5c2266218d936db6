"""``python -m workerless_devkit.cli``: the ``workerless`` command."""

import sys

from workerless_devkit.cli.entry import main

sys.exit(main())
