"""Numbered migrations: `mNNNN_name.py`, each with `up(db)` and its own frozen copy of the models."""
