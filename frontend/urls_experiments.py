"""Models and the experiment builder."""

urlpatterns: list = []
