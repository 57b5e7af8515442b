"""The embedded default backend: one SQLite file holding objects, refs, reflog and the
commit index (``file.py`` owns the file and its meta table; each store creates its own tables).
"""
