"""Models, workload datasets, evaluation sets and the experiment builder."""

from django.urls import path

from frontend.experiments import views, views_datasets, views_evaluation_sets, views_schedule

urlpatterns = [
    path("o/<slug:org>/models/", views.models_list, name="models"),
    path("o/<slug:org>/models/new/", views.model_new, name="model-new"),
    path("o/<slug:org>/models/<uuid:model_id>/edit/", views.model_edit, name="model-edit"),
    path("o/<slug:org>/models/<uuid:model_id>/delete/", views.model_delete, name="model-delete"),
    path("o/<slug:org>/experiments/", views.experiments_list, name="experiments"),
    path("o/<slug:org>/experiments/datasets/", views_datasets.datasets, name="datasets"),
    path(
        "o/<slug:org>/experiments/datasets/<uuid:dataset_id>/",
        views_datasets.dataset_detail,
        name="dataset-preview",
    ),
    path(
        "o/<slug:org>/experiments/datasets/<uuid:dataset_id>/delete/",
        views_datasets.dataset_remove,
        name="dataset-delete",
    ),
    path(
        "o/<slug:org>/experiments/evaluation-sets/",
        views_evaluation_sets.evaluation_sets,
        name="evaluation-sets",
    ),
    path(
        "o/<slug:org>/experiments/evaluation-sets/<uuid:evaluation_set_id>/delete/",
        views_evaluation_sets.evaluation_set_remove,
        name="evaluation-set-delete",
    ),
    path("o/<slug:org>/experiments/new/", views.experiment_new, name="experiment-new"),
    path("o/<slug:org>/experiments/check/", views.experiment_check, name="experiment-check"),
    path(
        "o/<slug:org>/experiments/predict/",
        views.experiment_predict,
        name="experiment-builder-predict",
    ),
    path(
        "o/<slug:org>/experiments/<uuid:experiment_id>/",
        views.experiment_detail,
        name="experiment-detail",
    ),
    path(
        "o/<slug:org>/experiments/<uuid:experiment_id>/edit/",
        views.experiment_edit,
        name="experiment-edit",
    ),
    path(
        "o/<slug:org>/experiments/<uuid:experiment_id>/check/",
        views.experiment_check,
        name="experiment-edit-check",
    ),
    path(
        "o/<slug:org>/experiments/<uuid:experiment_id>/predict/",
        views.experiment_predict,
        name="experiment-edit-builder-predict",
    ),
    path(
        "o/<slug:org>/experiments/<uuid:experiment_id>/duplicate/",
        views.experiment_duplicate,
        name="experiment-duplicate",
    ),
    path(
        "o/<slug:org>/experiments/<uuid:experiment_id>/start/",
        views.experiment_start,
        name="experiment-start",
    ),
    path(
        "o/<slug:org>/experiments/<uuid:experiment_id>/schedule/",
        views_schedule.experiment_schedule_set,
        name="experiment-schedule-set",
    ),
    path(
        "o/<slug:org>/experiments/<uuid:experiment_id>/schedule/state/",
        views_schedule.experiment_schedule_state,
        name="experiment-schedule-state",
    ),
]
