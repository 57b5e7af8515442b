"""The S3 backend (``s3://bucket/prefix``): objects packed per commit, refs by
conditional writes (see ``docs/scale-out.md``). obstore loads with a client, not with snapvc.

- ``client``: the S3 requests (``S3Client``), the location, the marker and settings;
- ``packfile``: the pack format (``encode_pack``, ``decode_pack_header``);
- ``cache``: frames and pack headers kept in memory and on local disk;
- ``packs``: the packs of a repository, their index, and how gc runs beside writers
  (``GcTiming``);
- ``objects``, ``commit_index``, ``refs``: the three stores; ``backend``: ``S3Backend``.
"""

from snapvc.backends.s3.packs import GcTiming

__all__ = ["GcTiming"]
