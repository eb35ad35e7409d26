"""Forms of the run pages: the history filters and a cancel request. Choices come from the
viewer's own organization only."""

from __future__ import annotations

from django import forms

from runs.access import scoped
from runs.models import GpuType, Membership, ModelSpec, Run
from runs.models.runs import RunState
from runs.selectors.run_history import HistoryFilters, engine_versions


class HistoryFilterForm(forms.Form):
    """GET filters of the run history; every field optional."""

    model = forms.ModelChoiceField(queryset=ModelSpec.objects.none(), required=False)
    gpu = forms.ChoiceField(label="GPU", required=False)
    engine = forms.ChoiceField(label="Engine version", required=False)
    state = forms.ChoiceField(choices=[("", "any state"), *RunState.choices], required=False)
    created_from = forms.DateField(
        label="From", required=False, widget=forms.DateInput({"type": "date"})
    )
    created_to = forms.DateField(
        label="To", required=False, widget=forms.DateInput({"type": "date"})
    )

    def __init__(self, *args, membership: Membership, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["model"].queryset = scoped(membership, ModelSpec).order_by("name")
        self.fields["model"].empty_label = "any model"
        self.fields["gpu"].choices = [("", "any GPU")] + [
            (gpu.id, gpu.display_name) for gpu in GpuType.objects.order_by("display_name")
        ]
        self.fields["engine"].choices = [("", "any engine")] + [
            (version, "simulator" if version == "sim" else f"vLLM {version}")
            for version in engine_versions(membership=membership)
        ]

    def clean(self):
        cleaned = super().clean()
        start, end = cleaned.get("created_from"), cleaned.get("created_to")
        if start and end and start > end:
            self.add_error("created_to", "The end date is before the start date.")
        return cleaned

    def filters(self) -> HistoryFilters:
        """The valid fields as filters; a field with an error filters nothing (its error is
        shown beside it)."""
        data = getattr(self, "cleaned_data", {})
        model = data.get("model")
        return HistoryFilters(
            model=model.id if model else None,
            gpu=data.get("gpu") or "",
            engine=data.get("engine") or "",
            state=data.get("state") or "",
            created_from=data.get("created_from") if "created_to" not in self.errors else None,
            created_to=data.get("created_to"),
        )


class RunCancelForm(forms.Form):
    reason = forms.CharField(
        max_length=Run._meta.get_field("cancel_reason").max_length,
        required=False,
        help_text="Shown with the run and told to its agent.",
    )
