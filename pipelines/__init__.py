"""Command-line entry points, run as `python -m pipelines.<name>`; the only place CLIs live."""
