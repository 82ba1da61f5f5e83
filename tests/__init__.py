"""biasaudit's tests; tests/conftest.py says which databases and engines they need."""
