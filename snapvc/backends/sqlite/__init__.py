"""The embedded default backend: one SQLite file holding objects, refs, reflog and the
commit index (``objects.py`` owns the file and its tables)."""
