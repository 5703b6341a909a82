"""Data owners' records: synthetic generators now, real-data loaders later."""

from dpmarket.data.consortium import Consortium, build_consortium

__all__ = ["Consortium", "build_consortium"]
