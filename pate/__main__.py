import sys

from pate.cli import main

sys.exit(main())
