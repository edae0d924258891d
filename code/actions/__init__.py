"""One module per ``--action`` of ``python -m code.main``."""
