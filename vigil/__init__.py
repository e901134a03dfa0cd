"""Vigil: lets AI agents wait for things."""
