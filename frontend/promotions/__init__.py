"""Promotion pages: proposing a trial for production, approving or rejecting it."""
