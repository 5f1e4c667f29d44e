"""airlock from Python: sandboxes whose only way out is airlock's policy proxy, and the
proxy's admin API.

>>> import asyncio, airlock
>>> async def main():
...     sandbox = airlock.Sandbox("task-1", allow=["pypi.org"])
...     await sandbox.ensure_running()
...     async for line in sandbox.exec_stream("pip download requests"):
...         print(line)
...     await sandbox.teardown()

The ``airlock`` binary is installed with this package (see ``airlock.find_binary``);
docs/python.md describes the API and the JSON line protocol it is built on.
"""

from ._binary import find_binary
from ._errors import (
    AdminError,
    AirlockError,
    BinaryNotFound,
    CommandFailed,
    EndpointNotFound,
    InvalidPolicy,
    NotFound,
    PolicyConflict,
    ProtocolError,
    SandboxDead,
    SandboxNotFound,
    Unauthorized,
)
from ._proxy import Proxy
from ._sandbox import (
    PROTOCOL_VERSION,
    Command,
    ExecResult,
    ExecStream,
    Sandbox,
    SandboxProvider,
)

__version__ = "0.1.0"

__all__ = [
    "PROTOCOL_VERSION",
    "AdminError",
    "AirlockError",
    "BinaryNotFound",
    "Command",
    "CommandFailed",
    "EndpointNotFound",
    "ExecResult",
    "ExecStream",
    "InvalidPolicy",
    "NotFound",
    "PolicyConflict",
    "Proxy",
    "ProtocolError",
    "Sandbox",
    "SandboxDead",
    "SandboxNotFound",
    "SandboxProvider",
    "Unauthorized",
    "find_binary",
]
