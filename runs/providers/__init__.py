"""Where agents run: rented GPU pods (Runpod) or a subprocess on this machine (local)."""
