"""``python -m dpmarket``."""

import sys

from dpmarket.cli import main

if __name__ == "__main__":
    sys.exit(main())
