"""``python -m deszoo`` runs the command line."""

import sys

from deszoo.cli import main

sys.exit(main())
