"""Organization settings pages: members and roles, API tokens, budgets, the Runpod key."""
