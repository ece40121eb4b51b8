"""Which ``Host`` a service without a token answers data routes for (review R28d s46 #5).

DNS rebinding: a web page on ``attacker.example`` whose name the attacker then points at 127.0.0.1
becomes same-origin with a service listening there, in the browser of anyone on that machine, and
reads every entry and MSA of a service without a token. Its requests carry ``Host:
attacker.example``: a name with a dot that the attacker's DNS answers. A service without a token
therefore answers its data routes (:class:`services.lookup.handlers.StoreRoute`) only for

* no ``Host`` at all (HTTP/1.0 health checkers; no browser sends none),
* an IP address (a page whose origin is an address was served by whoever has that address),
* a name without a dot (``localhost``, a Compose service name such as ``lookup``: names the
  machine's own resolver answers, never a public DNS zone an attacker controls),
* the ``--host`` serve listens on (:data:`SERVE_HOST_ENV`, set by ``featurecache serve``),
* the names of ``FEATURECACHE_ALLOWED_HOSTS`` (comma-separated; ``*.example.org`` for its
  subdomains; ``*`` for any: the check off),

and answers 400 naming the setting for any other. Liveness and readiness, the docs and
``/metrics`` say nothing of the store's data and are answered whatever the Host (a Kubernetes
probe sends the pod's address, a proxy's check its own name). With a token the check is off: a
page cannot send the bearer token it does not know, and a cluster reaches the service by names
nobody lists in advance.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

#: set by ``featurecache serve`` for its workers: the ``--host`` it listens on
SERVE_HOST_ENV = "_FEATURECACHE_SERVE_HOST"
#: the setting that names further hosts
ALLOWED_HOSTS_ENV = "FEATURECACHE_ALLOWED_HOSTS"


def host_name(header: str) -> str:
    """The name or address of a ``Host`` header value, less its port, brackets, trailing dot and case:
    ``Example.ORG.:8000`` → ``example.org``, ``[::1]:8000`` → ``::1``."""
    value = header.strip().lower()
    if value.startswith("["):  # an IPv6 address, maybe with a port
        return value[1:].partition("]")[0]
    if value.count(":") == 1:
        value = value.partition(":")[0]
    return value[:-1] if value.endswith(".") else value


def _is_address(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


@dataclass(frozen=True)
class HostCheck:
    """The hosts a service without a token answers data routes for (see the module's docstring)."""

    names: frozenset[str]  # exact names, lower case
    suffixes: tuple[str, ...]  # ".example.org" of "*.example.org"

    @classmethod
    def of(cls, allowed: str, serve_host: str | None) -> HostCheck | None:
        """From ``FEATURECACHE_ALLOWED_HOSTS`` (``allowed``) and serve's ``--host``; None (no check)
        when ``allowed`` holds ``*``."""
        patterns = [host_name(p) for p in allowed.split(",") if p.strip()]
        if "*" in patterns:
            return None
        names = {p for p in patterns if not p.startswith("*.")}
        if serve_host:
            names.add(host_name(serve_host))
        return cls(frozenset(names), tuple(p[1:] for p in patterns if p.startswith("*.")))

    def refusal(self, header: str | None) -> str | None:
        """Why a request with this ``Host`` header value is not answered, or None when it is."""
        if header is None:
            return None
        name = host_name(header)
        if "." not in name or _is_address(name) or name in self.names or name.endswith(self.suffixes):
            return None
        shown = header if len(header) <= 100 else header[:100] + "…"
        return (
            f"Host {shown!r} is not answered by this service: without a token it answers a name with a dot "
            f"only when {ALLOWED_HOSTS_ENV} lists it (comma-separated, '*.domain' for its subdomains, '*' "
            "for any), to refuse DNS-rebinding pages; list the name there or give the service a token"
        )
