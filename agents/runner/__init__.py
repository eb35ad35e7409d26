"""The agent runner: runs a whole job unattended and delivers every message to the site."""
