"""Models, experiments and workload datasets: their pages, the builder's and the model form's
translation to the API's payloads (``builder``, ``model_form``, ``form_slots``, ``form_text``),
the estimate panel and what fits which GPUs (``fit``)."""
