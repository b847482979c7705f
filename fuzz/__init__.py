"""Fuzzing harnesses for pt2serve's reader (see fuzz/README.md)."""
