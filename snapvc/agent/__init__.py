"""The agent layer: the ``State`` working copy, threads and sessions (a framework's ids
on branches), and the resumable ``Runner``. It uses a repository through
``snapvc.repository.roles``, never its storage."""
