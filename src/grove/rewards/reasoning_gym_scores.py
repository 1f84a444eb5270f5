"""Placeholder: filled by the adapter that lives here."""
