"""Dramatiq broker set-up and actors. Thin: load by id, call engine/, write through models/, publish."""
