"""Stand-ins for outside services that tests drive through the real client libraries."""
