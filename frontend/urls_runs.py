"""The live run page, run history and comparisons."""

urlpatterns: list = []
