"""Synchronous reads of the store's sharded arrays: the per-sample read path without zarr's event loop.

Every array the writers create is one layout (``layout.py``): a regular grid of shards, each shard a
file of zstd-compressed inner chunks (``bytes`` then ``zstd``) with its index at the end
(``bytes`` + ``crc32c``), the zarr v3 sharding codec's format. zarr reads a slice of such an array
through its event loop: the call hands off to zarr's loop thread, and each inner chunk's zstd
decode is handed on to a thread of its own (``asyncio.to_thread``). For the slices a training
sample reads (a few hundred to a few thousand rows of a few arrays) those hand-offs are most of the
cost: ~1.2 ms a slice through zarr against ~0.15 ms read directly (one ``pread`` of the shard index,
one of each inner chunk, numcodecs' zstd), and ~2× less CPU per training sample
(``benchmarks/shard_reads.py``).

:class:`ShardReader` reads that one layout, byte for byte what zarr reads (the same fill value where
a shard file or an inner chunk was left unwritten, the same clipping of a slice to the array), and
checks what zarr checks: the shard index's crc32c, and each chunk's zstd content checksum where
the array has one. :meth:`ShardReader.of` takes the array's zarr metadata and returns None for any
other layout (another codec, no sharding, the index first); :func:`layout_problem` says why. The
store's reader (``root.PartArrays``) refuses such an array instead of handing it to zarr: a
``zarr.json`` whose codecs are plain ``bytes`` made zarr return any file's raw bytes as the array
(review R42c s52 #4), where this layout reads nothing that does not end with a shard index passing
its crc32c. A shard file that is a symbolic link is not followed (``O_NOFOLLOW``): a store's own
files never are links, and one put in a part led the read to a file outside the store. Reads are
plain file reads, safe from any thread and in a forked process.
"""

from __future__ import annotations

import errno
import itertools
import os
from pathlib import Path
from typing import Any

import google_crc32c
import numpy as np
import zarr
from numcodecs import Zstd
from zarr.codecs import BytesCodec, Crc32cCodec, ShardingCodec, ZstdCodec
from zarr.codecs.sharding import ShardingCodecIndexLocation
from zarr.core.chunk_grids import RegularChunkGrid
from zarr.core.metadata.v3 import ArrayV3Metadata

#: an inner chunk left out of its shard (all fill value): offset and length both 2**64 - 1
_EMPTY = np.iinfo(np.uint64).max
#: bytes of one inner chunk's index entry (offset, length: two little-endian uint64) and of the
#: index's crc32c
_ENTRY, _CRC = 16, 4
#: how a shard file is opened: a symbolic link in its place is an error (ELOOP), not followed
_OPEN_FLAGS = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
#: the store format's layout, as :func:`layout_problem` names it
STORE_LAYOUT = ("sharding_indexed (inner chunks: bytes, zstd; the index: bytes little-endian, crc32c, at the "
                "shard's end) over a regular chunk grid")  # fmt: skip


def _codec_names(codecs: Any) -> str:
    """``[name, ...]`` of zarr codec objects, as their metadata names them."""
    names = []
    for c in codecs:
        try:
            names.append(str(c.to_dict()["name"]))
        except (AttributeError, KeyError, TypeError, ValueError):
            names.append(type(c).__name__)
    return "[" + ", ".join(names) + "]"


def layout_problem(meta: Any, dtype: np.dtype | None = None) -> str | None:
    """None when the array of zarr metadata ``meta`` (and numpy ``dtype``) is of the layout
    :class:`ShardReader` reads (the store format's: :data:`STORE_LAYOUT`; an inner chunk without
    zstd, a multi-byte dtype of either byte order and any number of dimensions read too); else what
    differs, in words."""
    if not isinstance(meta, ArrayV3Metadata):
        return f"not zarr v3 array metadata ({type(meta).__name__})"
    if not isinstance(meta.chunk_grid, RegularChunkGrid):
        return f"chunk grid {type(meta.chunk_grid).__name__}, not a regular one"
    if len(meta.codecs) != 1 or not isinstance(meta.codecs[0], ShardingCodec):
        return f"codecs {_codec_names(meta.codecs)}, not sharding_indexed alone"
    sharding = meta.codecs[0]
    if sharding.index_location != ShardingCodecIndexLocation.end:
        return "the shard index at the shard's start"
    index_codecs = list(sharding.index_codecs)
    if [type(c) for c in index_codecs] != [BytesCodec, Crc32cCodec]:
        return f"shard index codecs {_codec_names(index_codecs)}, not [bytes, crc32c]"
    index_bytes = index_codecs[0]
    assert isinstance(index_bytes, BytesCodec)
    if index_bytes.endian is not None and index_bytes.endian.value != "little":
        return "a big-endian shard index"  # the index is read as little-endian uint64
    inner = list(sharding.codecs)
    if [type(c) for c in inner] not in ([BytesCodec], [BytesCodec, ZstdCodec]):
        return f"inner chunk codecs {_codec_names(inner)}, not [bytes, zstd]"
    if any(s % c for s, c in zip(meta.chunk_grid.chunk_shape, sharding.chunk_shape, strict=True)):
        return f"shards {tuple(meta.chunk_grid.chunk_shape)} not a multiple of inner chunks {tuple(sharding.chunk_shape)}"
    if dtype is not None and (dtype.hasobject or dtype.fields is not None):
        return f"dtype {dtype}"
    return None


class ShardReader:
    """Reads step-1 slices of one sharded array at ``path`` (see the module docstring)."""

    def __init__(self, path: Path, meta: ArrayV3Metadata, dtype: np.dtype, fill: Any, zstd: bool,
                 endian: str | None) -> None:  # fmt: skip
        self.path = Path(path)
        self._meta = meta
        self.shape: tuple[int, ...] = tuple(meta.shape)
        self._shard: tuple[int, ...] = tuple(meta.chunk_grid.chunk_shape)  # type: ignore[attr-defined]
        (sharding,) = meta.codecs
        assert isinstance(sharding, ShardingCodec)  # checked by of()
        self._inner: tuple[int, ...] = tuple(sharding.chunk_shape)
        self._per_shard = tuple(s // c for s, c in zip(self._shard, self._inner, strict=True))
        self._index_bytes = int(np.prod(self._per_shard)) * _ENTRY
        self.dtype = dtype
        #: the stored bytes' dtype (the bytes codec's byte order)
        self._stored = dtype.newbyteorder("<" if endian == "little" else ">") if endian else dtype
        self._fill = fill
        self._zstd = Zstd() if zstd else None

    @classmethod
    def of(cls, path: Path, arr: zarr.Array) -> ShardReader | None:
        """A reader for ``arr`` (opened at ``path``), or None when its layout is not the one this
        module reads."""
        meta = arr.metadata
        dtype = np.dtype(arr.dtype)
        if layout_problem(meta, dtype) is not None:
            return None
        assert isinstance(meta, ArrayV3Metadata)
        sharding = meta.codecs[0]
        assert isinstance(sharding, ShardingCodec)
        inner = list(sharding.codecs)
        assert isinstance(inner[0], BytesCodec)
        endian = inner[0].endian
        return cls(path, meta, dtype, arr.fill_value, zstd=len(inner) == 2,
                   endian=None if endian is None or dtype.itemsize == 1 else endian.value)  # fmt: skip

    def takes(self, selection: tuple[slice, ...]) -> bool:
        """Whether ``selection`` is one this reader reads: slices of step 1, at most one per
        dimension (anything else goes through zarr, which raises its own IndexError)."""
        return len(selection) <= len(self.shape) and all(
            isinstance(s, slice) and s.step in (None, 1) for s in selection
        )

    def read(self, selection: tuple[slice, ...]) -> np.ndarray:
        """``array[selection]`` as zarr reads it. ValueError for a shard whose index fails its
        checksum or a chunk cut short; numcodecs' RuntimeError for a chunk that does not decompress
        or fails its content checksum; OSError from the file system."""
        full = tuple(selection) + (slice(None),) * (len(self.shape) - len(selection))
        bounds = []
        for s, n in zip(full, self.shape, strict=True):
            start, stop, _ = s.indices(n)
            bounds.append((start, max(start, stop)))
        out = np.full([b - a for a, b in bounds], self._fill, dtype=self.dtype)
        if out.size == 0:
            return out
        shards = [range(a // s, -(-b // s)) for (a, b), s in zip(bounds, self._shard, strict=True)]
        for coords in itertools.product(*shards):
            self._read_shard(coords, bounds, out)
        return out

    def _read_shard(self, coords: tuple[int, ...], bounds: list[tuple[int, int]], out: np.ndarray) -> None:
        """Copy what shard ``coords`` holds of the selection ``bounds`` into ``out``."""
        path = self.path / self._meta.encode_chunk_key(coords)
        try:
            fd = os.open(path, _OPEN_FLAGS)
        except FileNotFoundError:
            return  # all fill value, as zarr reads it (the caller checks which files must exist)
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.EMLINK) and os.path.islink(path):
                raise OSError(exc.errno, "a symbolic link, not followed: a store's own files are never links, "
                                         "and one inside a part can lead outside the store", str(path)) from None  # fmt: skip
            raise
        try:
            size = os.fstat(fd).st_size
            n = self._index_bytes
            raw = os.pread(fd, n + _CRC, max(0, size - n - _CRC))
            if len(raw) != n + _CRC or google_crc32c.value(raw[:n]) != int.from_bytes(raw[n:], "little"):
                raise ValueError(f"the shard index of {path} fails its crc32c checksum ({size} bytes)")
            index = np.frombuffer(raw[:n], dtype="<u8").reshape(*self._per_shard, 2)
            origin = [c * s for c, s in zip(coords, self._shard, strict=True)]
            # the inner chunks (in the shard's own grid) that hold part of the selection
            inner = []
            for (a, b), o, s, c in zip(bounds, origin, self._shard, self._inner, strict=True):
                lo, hi = max(a, o), min(b, o + s)
                inner.append(range((lo - o) // c, -(-(hi - o) // c)) if hi > lo else range(0))
            data_end = size - n - _CRC
            for local in itertools.product(*inner):
                offset, length = (int(x) for x in index[local])
                if offset == _EMPTY and length == _EMPTY:
                    continue  # left out: all fill value
                if offset + length > data_end:  # an index that passed its crc32c but points outside
                    raise ValueError(f"{path}: the shard index puts inner chunk {local} at bytes "
                                     f"{offset}..{offset + length}, past the data's end ({data_end})")  # fmt: skip
                data = os.pread(fd, length, offset)
                if len(data) != length:
                    raise ValueError(
                        f"{path}: inner chunk {local} is cut short ({len(data)} of {length} bytes)"
                    )
                if self._zstd is not None:
                    data = self._zstd.decode(data)
                chunk = np.frombuffer(data, dtype=self._stored).reshape(self._inner)
                start = [o + i * c for o, i, c in zip(origin, local, self._inner, strict=True)]
                src, dst = [], []
                for (a, b), c0, c in zip(bounds, start, self._inner, strict=True):
                    lo, hi = max(a, c0), min(b, c0 + c)
                    src.append(slice(lo - c0, hi - c0))
                    dst.append(slice(lo - a, hi - a))
                out[tuple(dst)] = chunk[tuple(src)]
        finally:
            os.close(fd)
