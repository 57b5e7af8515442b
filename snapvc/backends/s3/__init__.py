"""The S3 backend (``s3://bucket/prefix``): objects packed per commit, refs by
conditional writes (see ``docs/scale-out.md``). obstore loads with it, not with snapvc."""
