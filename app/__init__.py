"""pt2serve's HTTP front end (FastAPI) and command line; it imports only the modules of `reader`
that docs/api.md lists as public, and of each only its `__all__` (tests/test_app_imports.py)."""
