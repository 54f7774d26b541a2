"""Callbacks of the larger pages, kept apart from their layouts; they delegate to app.services."""
