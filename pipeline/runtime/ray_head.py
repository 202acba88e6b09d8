"""The ports of the local Ray head `make run` starts, so that two runs on one machine (two
projects, two users) each get a head of their own, or the second is refused in one line.

`ray start --head` binds, besides the GCS port it is given (`RAY_PORT`), fixed default ports:
the dashboard (8265), the dashboard agent (52365) and the Ray Client server (10001). A second
head started beside a first with only another `--port` cannot bind the agent's port; Ray then
stops its raylet about 30 s later (a SIGTERM), and the stage connected to it retried the lost GCS
for good. So each of those ports is the default when it is free and a free one the system picks
otherwise, and the GCS port itself is checked first:

    python -m pipeline.runtime.ray_head 6388   # prints the `ray start` options, or one line and status 2

Standard library only: it runs before Ray starts, in a second.
"""

from __future__ import annotations

import socket
import sys

DEFAULTS = {"--dashboard-port": 8265, "--dashboard-agent-listen-port": 52365, "--ray-client-server-port": 10001}


def is_free(port: int, host: str = "127.0.0.1") -> bool:
    """Whether nothing listens on `port` (a TCP bind on all interfaces succeeds, as Ray binds)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("", port))
        except OSError:
            return False
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:  # and nobody answers on it locally
        s.settimeout(0.5)
        return s.connect_ex((host, port)) != 0


def free_port(avoid: set[int]) -> int:
    """A port the system gives as free, not one of `avoid`."""
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("", 0))
            port = s.getsockname()[1]
        if port not in avoid:
            return port


def head_options(gcs_port: int) -> list[str]:
    """`ray start --head` options for a head at `gcs_port`: each default port kept when free."""
    taken = {gcs_port}
    options = []
    for flag, default in DEFAULTS.items():
        port = default if default not in taken and is_free(default) else free_port(taken)
        taken.add(port)
        options.append(f"{flag}={port}")
    return options


def busy_line(gcs_port: int) -> str:
    """The refusal when RAY_PORT is taken: who may hold it, and the two ways on."""
    other = free_port({gcs_port})
    return (f"ctsweep: error: RAY_PORT {gcs_port} is in use, most likely by the Ray head of another `make run` on this "
            f"machine (`ray health-check --address 127.0.0.1:{gcs_port}` says whether it is one): share that cluster "
            f"with `RAY_ADDRESS=127.0.0.1:{gcs_port} make run`, or start a head of your own beside it with "
            f"`RAY_PORT={other} make run`")


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1 or not args[0].isdigit() or not 1024 <= int(args[0]) <= 65535:
        print(f"ctsweep: error: RAY_PORT {args[0] if args else '(none)'!r} is not a port; allowed: a whole number "
              f"from 1024 to 65535", file=sys.stderr)
        return 2
    port = int(args[0])
    if not is_free(port):
        print(busy_line(port), file=sys.stderr)
        return 2
    print(" ".join(head_options(port)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
