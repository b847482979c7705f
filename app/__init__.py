"""pt2serve's HTTP front end (FastAPI); it uses only the public API of `reader`."""
