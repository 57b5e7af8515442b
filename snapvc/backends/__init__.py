"""Where a repository lives: one folder per backend, each holding its object store, ref
store, commit index and the ``Backend`` that ties them to a location.

- ``memory/``: everything in this process (``memory://``): tests and throwaway runs;
- ``sqlite/``: the embedded default, one SQLite file (any other location is its path);
- ``s3/``: S3-compatible object storage (``s3://bucket/prefix``), objects packed per commit.

``snapvc.backends.base.Backend`` is what each one provides; ``snapvc.backends.open.open_backend``
picks one from a location.
"""
