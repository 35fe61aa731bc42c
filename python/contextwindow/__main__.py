"""``python -m contextwindow``: the CLI."""

import sys

from .cli import main

sys.exit(main())
