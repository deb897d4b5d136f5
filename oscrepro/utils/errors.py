"""Errors shared by layers that cannot import each other (data modules raise them, the CLIs catch them)."""

from __future__ import annotations


class ConfigError(ValueError):
    """One or more config values out of their allowed range; the message lists each key, value and rule."""
