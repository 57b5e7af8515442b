"""The memory backend (``memory://``): objects, refs and commits in this process."""
