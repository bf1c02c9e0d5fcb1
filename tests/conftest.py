"""Test-suite root. Its presence puts ``tests/`` on ``sys.path`` (pytest's default import mode), so that every test
module can ``import real_models``: tiny random instances of the real LLaDA/MMaDA classes (``tests/real_models.py``)."""
