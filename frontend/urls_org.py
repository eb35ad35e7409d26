"""Organization settings: members and roles, API tokens, budgets, the Runpod key."""

urlpatterns: list = []
