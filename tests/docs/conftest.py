"""The documentation's tests: examples (harness.py), output reference, links, and the site in a browser."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))  # harness.py, beside this file
sys.path.insert(0, str(Path(__file__).parents[1]))  # tests/browser.py, the shared browser fixture

from browser import chromium_page  # noqa: E402, F401  (the shared browser fixture, registered here)
