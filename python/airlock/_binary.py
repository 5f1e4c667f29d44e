"""Finding the ``airlock`` executable that this package drives."""

from __future__ import annotations

import os
import shutil
import sys
import sysconfig
from pathlib import Path
from typing import Optional, Union

from ._errors import BinaryNotFound

__all__ = ["find_binary"]


def find_binary(explicit: Optional[Union[str, "os.PathLike[str]"]] = None) -> str:
    """The path of the ``airlock`` executable.

    In order: ``explicit``; the ``AIRLOCK_BIN`` environment variable; the one installed with
    this package (the scripts directory of this interpreter, where the wheel puts it); the
    first ``airlock`` on ``PATH``.
    """
    if explicit is not None:
        return _checked(os.fspath(explicit), "the binary argument")
    from_env = os.environ.get("AIRLOCK_BIN")
    if from_env:
        return _checked(from_env, "AIRLOCK_BIN")
    candidates = []
    scripts = sysconfig.get_path("scripts")
    if scripts:
        candidates.append(Path(scripts) / "airlock")
    candidates.append(Path(sys.executable).parent / "airlock")
    for candidate in candidates:
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    on_path = shutil.which("airlock")
    if on_path:
        return on_path
    raise BinaryNotFound(
        "no airlock executable: install the package with pip (it ships the binary), "
        "set AIRLOCK_BIN, or put airlock on PATH"
    )


def _checked(path: str, origin: str) -> str:
    if not (os.path.isfile(path) and os.access(path, os.X_OK)):
        raise BinaryNotFound(f"{origin} names {path!r}, which is not an executable file")
    return path
