"""The Dash IDE."""
