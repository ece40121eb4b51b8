"""The container's ``HEALTHCHECK``: ``GET /v1/health`` where ``featurecache serve`` listens.

``python3 -m services.lookup.healthcheck [PID]`` (PID 1 by default: the container's main process)
reads the address from that process's command line, so ``docker run IMAGE /store --port 9000`` is
checked on port 9000 with no second setting to keep in line with it. Exit 0: healthy; 1: not (the
server does not answer, or answers 503: the store directory it serves was removed under a bind
mount of it, which only a restart mends; the reason is printed, so ``docker inspect`` shows it).
Standard library only, so the check costs a Python start and one request.
"""

from __future__ import annotations

import json
import sys
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path

#: ``featurecache serve``'s own defaults (featurecache/cli.py)
DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8000
_ANY_ADDRESS = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}


def serve_address(argv: Sequence[str]) -> tuple[str, int]:
    """``(host, port)`` to reach the server started by ``argv`` (its ``--host`` / ``--port``, the
    last one given winning as in the CLI); a wildcard bind is reached on loopback."""
    host, port = DEFAULT_HOST, str(DEFAULT_PORT)
    for i, arg in enumerate(argv):
        name, eq, value = arg.partition("=")
        if name not in ("--host", "--port"):
            continue
        if not eq:
            if i + 1 >= len(argv):
                continue
            value = argv[i + 1]
        if name == "--host":
            host = value
        else:
            port = value
    return _ANY_ADDRESS.get(host, host), int(port)


def health_url(pid: int | str = 1) -> str:
    raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    host, port = serve_address([a.decode(errors="replace") for a in raw.split(b"\0") if a])
    return f"http://{f'[{host}]' if ':' in host else host}:{port}/v1/health"


def main(argv: Sequence[str]) -> int:
    try:
        url = health_url(argv[0] if argv else 1)
        with urllib.request.urlopen(url, timeout=4) as response:
            return 0 if response.status == 200 else 1
    except urllib.error.HTTPError as exc:  # answered, not 200: say why (the answer's detail)
        try:
            detail = json.loads(exc.read()).get("detail", "")
        except (OSError, ValueError, AttributeError):
            detail = ""
        sys.stderr.write(f"unhealthy: {exc.code} {detail}".rstrip() + "\n")
        return 1
    except (OSError, ValueError) as exc:  # no such process, refused, timed out, a bad --port
        sys.stderr.write(f"unhealthy: {exc}\n")
        return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
