"""``python -m snapvc`` is the ``snapvc`` command."""

from snapvc.cli import main

main()
