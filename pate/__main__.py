"""``python -m pate``: the ``pate`` command (see ``pate.cli``)."""

import sys

from pate.cli import main

if __name__ == "__main__":
    sys.exit(main())
