"""Every exception featurecache raises.

Each class subclasses :class:`FeatureCacheError` and also the builtin it resembles, so a caller's
ordinary ``except KeyError`` / ``except ValueError`` keeps working.
"""

from __future__ import annotations

from typing import TypeVar

_E = TypeVar("_E", bound=BaseException)


class FeatureCacheError(Exception):
    """Root of every featurecache error."""


class UsageError(FeatureCacheError, ValueError):
    """A command's argument is invalid (a missing directory, a count below 1, …): exit status 2."""


class InputError(FeatureCacheError, ValueError):
    """An input file cannot be used. Carries the path and the stage that rejected it."""

    def __init__(self, message: str, *, path: str | None = None, stage: str | None = None) -> None:
        super().__init__(message)
        self.path = path
        self.stage = stage


class UnsupportedFormatError(InputError):
    """The file is of a format featurecache does not read (e.g. structure factors, hhr)."""


class ParseError(InputError):
    """The file is of a known format but its contents cannot be parsed."""


class CCDError(ParseError):
    """The ``--ccd`` cannot be read (a ``components.cif.gz`` cut short), or one component's
    definition in it does not parse. ``path`` is the CCD file read: the ``components.cif[.gz]``, or
    the component's own file of a CCD directory; ``component`` is the code whose definition is
    broken, None when the whole file cannot be read. The stage is always ``ccd``."""

    def __init__(self, message: str, *, path: str | None = None, component: str | None = None) -> None:
        super().__init__(message, path=path, stage="ccd")
        self.component = component


class EmptyStructureError(InputError):
    """The file parsed but holds no usable coordinates (header-only, waters only, ...)."""


class TokenizeError(InputError):
    """The structure parsed but cannot be tokenized."""


class MSAError(InputError):
    """An MSA file cannot be read or does not match its chain."""


class ChemError(FeatureCacheError, RuntimeError):
    """RDKit could not build a molecule or a conformer for a component."""


class EmbeddingInterrupted(ChemError):
    """A SIGINT reached RDKit while it embedded a component, and RDKit cut the work short (it
    cancels the embedding, or a substructure search inside it). The task fails rather than fall
    back to a worse strategy; the driver computes the component again."""


class StoreError(FeatureCacheError, OSError):
    """The store is missing, unreadable, unwritable or inconsistent."""


class UnfinishedBuildError(StoreError):
    """A store whose first build has not finished (its index lists only the entries written so far,
    without the MSAs and conformers of the stages still to run) given to a reader that trains on it
    (``store.reader.unfinished_build_error``). ``reason``: the message without the caller's own way
    to read it anyway (``anyway``, appended)."""

    def __init__(self, reason: str, anyway: str = "") -> None:
        super().__init__(reason + anyway)
        self.reason = reason


class StoreVersionError(StoreError):
    """The store was written with a format or schema version this code cannot read. ``public``: the
    same without the store's path, for a client of the lookup service (asking again cannot help:
    the server has to be upgraded, or the store rebuilt)."""

    def __init__(self, message: str, public: str | None = None) -> None:
        super().__init__(message)
        self.public = public or "the store is of a format this server does not read: upgrade the server"


class NotFound(FeatureCacheError, KeyError):
    """An entry id, chain or MSA key is not in the store. ``status``: the HTTP status the lookup
    service answered (404), None when raised by a local reader."""

    def __init__(self, *args: object, status: int | None = None) -> None:
        super().__init__(*args)
        self.status = status

    def __str__(self) -> str:  # KeyError quotes its argument; keep the message readable
        return str(self.args[0]) if self.args else "not found"


class InvalidRequest(FeatureCacheError, ValueError):
    """A request is malformed or exceeds a configured limit (maps to HTTP 4xx).

    Raised by a lookup client from the service's answer: ``status`` (400, 413 or 422); on a 413,
    ``limit`` names the exceeded limit (``"max_response_bytes"``, …), ``maximum`` its value and
    ``got`` the request's size by it (how many parts a split needs). None when not said."""

    def __init__(
        self,
        *args: object,
        status: int | None = None,
        limit: str | None = None,
        maximum: int | None = None,
        got: int | None = None,
    ) -> None:
        super().__init__(*args)
        self.status = status
        self.limit = limit
        self.maximum = maximum
        self.got = got


class ServiceError(FeatureCacheError, ConnectionError):
    """The lookup service could not be reached or answered with an error. ``status``: the HTTP
    status it answered, None when there was no answer (or none this error stands for)."""

    def __init__(self, *args: object, status: int | None = None) -> None:
        super().__init__(*args)
        self.status = status


class ServiceUnavailable(ServiceError):
    """The lookup service cannot be reached, did not answer in time, or answered 502/503/504 — after
    the client's retries. Says the service is down or hung, not that one request was bad."""


class AuthenticationError(ServiceError, PermissionError):
    """The lookup service refused the request's bearer token (HTTP 401): missing or wrong."""


class LoaderError(FeatureCacheError, RuntimeError):
    """The training client cannot go on (e.g. every one of many samples in a row failed).
    ``error_class``: the class name of the last sample's failure when that is why (e.g.
    ``"AuthenticationError"``: the service refused the token mid-run), else None."""

    def __init__(self, message: str, error_class: str | None = None) -> None:
        super().__init__(message)
        self.error_class = error_class


class TrainingError(FeatureCacheError, RuntimeError):
    """The training run cannot go on: a non-finite loss, a log or checkpoint that cannot be written."""


class KernelShapeError(FeatureCacheError, ValueError):
    """A Triton launcher was given tensors of incompatible shapes or dtypes."""


def raised_from(exc: BaseException, cls: type[_E]) -> _E | None:
    """The exception of class ``cls`` that ``exc`` is or was raised from (its ``__cause__`` /
    ``__context__`` chain, each link once), else None."""
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        if isinstance(cur, cls):
            return cur
        seen.add(id(cur))
        cur = cur.__cause__ or cur.__context__
    return None
