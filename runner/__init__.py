"""The device side of Vigil: `vigil runner` runs commands a paired Vigil server assigns (standard library only)."""

#: sent as X-Vigil-Runner-Version; the wire protocol itself is version 1 (docs/runner.md)
__version__ = "0.1.0"
