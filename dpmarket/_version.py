"""dpmarket's version, in one place (``pyproject.toml`` reads it; ``--version`` prints it)."""

__version__ = "0.1.0"
