"""The parts of ``manage.py demo_run`` (``runs/management/commands/demo_run.py``), one
module per job: the demo experiments and their set-up (``plans``), the real-vLLM-on-a-CPU
preparation (``vllm_cpu``), running the site and following the run (``running``), and the
printed answer (``answer``). The command parses its arguments and calls them in order."""
