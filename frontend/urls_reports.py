"""Reports for managers, promotion with approval, the audit log viewer."""

urlpatterns: list = []
