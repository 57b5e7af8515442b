"""Running a command as the file modes would bind a user, when the tests run as root."""

from __future__ import annotations

import os
import shutil

import pytest


def without_root_file_access(command: list[str]) -> list[str]:
    """``command`` run so that file modes bind it: as is for a user, and for root (as the
    tests run in CI) through util-linux's ``setpriv`` without the capabilities that let
    root read, search and write whatever the mode (CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH)."""
    if os.geteuid() != 0:
        return command
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("running as root, and util-linux's setpriv (which drops root's file access) is not installed")
    return [setpriv, "--inh-caps=-all", "--bounding-set=-dac_override,-dac_read_search", *command]
