"""The audit log page."""
