"""Server-rendered pages of the web UI."""
