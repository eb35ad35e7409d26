"""Promotion of a trial to production, with approval."""

from django.urls import path

from frontend.promotions import views

urlpatterns = [
    path("o/<slug:org>/promotions/", views.promotions_list, name="promotions"),
    path(
        "o/<slug:org>/promotions/propose/<uuid:run_id>/",
        views.promotion_propose_page,
        name="promotion-propose-run",
    ),
    path(
        "o/<slug:org>/promotions/propose/<uuid:run_id>/<int:index>/",
        views.promotion_propose_page,
        name="promotion-propose",
    ),
    path(
        "o/<slug:org>/promotions/<uuid:promotion_id>/",
        views.promotion_detail,
        name="promotion-detail",
    ),
    path(
        "o/<slug:org>/promotions/<uuid:promotion_id>/approve/",
        views.promotion_approve_view,
        name="promotion-approve",
    ),
    path(
        "o/<slug:org>/promotions/<uuid:promotion_id>/reject/",
        views.promotion_reject_view,
        name="promotion-reject",
    ),
]
