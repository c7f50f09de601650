"""Decompressing the value of a compressed Kafka message (a *wrapper*), with Kafka's framings.

* gzip (codec 1): one or more gzip members, inflated by zlib.
* snappy (codec 2): xerial snappy-java framing (magic ``\\x82SNAPPY\\0``, then
  int32 length + raw snappy block, repeated) as Kafka writes it, or raw snappy.
* lz4 (codec 3): an LZ4 frame; for message format 0, the frame as Kafka 0.8/0.9
  wrote it, with the wrong header checksum (KAFKA-3160).

:func:`decompress` returns a bytes-like object and raises :class:`CodecMissing`
when the codec is unknown or its library is not installed; any other exception
means the data is damaged. Every codec library used releases the GIL while it
decompresses (zlib, cramjam or python-snappy, lz4).
"""

from __future__ import annotations

import struct
import zlib
from typing import Any, Callable, Dict, Optional, Tuple

__all__ = ["CODEC_NAMES", "CodecMissing", "decompress", "read_only", "xxh32"]

CODEC_GZIP, CODEC_SNAPPY, CODEC_LZ4 = 1, 2, 3
_INT32 = struct.Struct(">i")

CODEC_NAMES = {CODEC_GZIP: "gzip", CODEC_SNAPPY: "snappy", CODEC_LZ4: "lz4"}


class CodecMissing(Exception):
    """The library for a codec is not installed, or the codec is unknown."""


def decompress(codec: int, magic: int, payload: bytes) -> Any:
    """Decompress a wrapper's value with Kafka's framing for ``codec`` and ``magic``.

    Returns a bytes-like object (``bytes``, ``bytearray`` or cramjam's ``Buffer``). Every codec library
    used here releases the GIL while it decompresses.
    """
    if codec == CODEC_GZIP:
        return _gunzip(payload)
    if codec == CODEC_SNAPPY:
        return _snappy_decode(payload)
    if codec == CODEC_LZ4:
        return _lz4_decode_kafka08(payload) if magic == 0 else _lz4_frame_decode(payload)
    raise CodecMissing(f"unknown compression codec {codec} for message format magic {magic}")


def _gunzip(payload: bytes) -> bytes:
    """Every gzip member of ``payload``, inflated by zlib (which checks each member's CRC-32 and length).

    ``gzip.decompress`` parses headers in Python and CRCs the output in a second pass;
    zlib does both while inflating, with the GIL released.
    """
    inflater = zlib.decompressobj(31)
    out = inflater.decompress(payload)
    if not inflater.eof:
        raise ValueError("gzip stream cut short")
    rest = inflater.unused_data
    if not rest:
        return out
    parts = [out]
    while rest:  # concatenated members, as java.util.zip.GZIPInputStream also reads them
        inflater = zlib.decompressobj(31)
        parts.append(inflater.decompress(rest))
        if not inflater.eof:
            raise ValueError("gzip stream cut short")
        rest = inflater.unused_data
    return b"".join(parts)


def _load_snappy_raw() -> Optional[Callable[[Any], Any]]:
    """The raw (unframed) snappy decompressor: cramjam's, else python-snappy's; ``None`` if neither.

    It returns a bytes-like object (cramjam: its own ``Buffer``, which supports the buffer protocol).
    """
    try:
        import cramjam

        return cramjam.snappy.decompress_raw
    except ImportError:
        pass
    try:
        import snappy

        return snappy.uncompress  # type: ignore[no-any-return]
    except ImportError:
        return None


def _load_snappy_into() -> Optional[Tuple[Callable[[Any], int], Callable[[Any, Any], int]]]:
    """cramjam's ``(decompressed length, decompress into a buffer)`` for raw snappy, or ``None``."""
    try:
        import cramjam
    except ImportError:
        return None
    return cramjam.snappy.decompress_raw_len, cramjam.snappy.decompress_raw_into


def _load_lz4_frame() -> Optional[Callable[[Any], bytes]]:
    try:
        import lz4.frame

        return lz4.frame.decompress  # type: ignore[no-any-return]
    except ImportError:
        return None


_snappy_raw = _load_snappy_raw()
_snappy_into = _load_snappy_into()
_lz4_frame = _load_lz4_frame()

#: The header xerial's snappy-java writes in front of its framed blocks (Kafka's snappy).
_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER_LEN = 16     # magic(8) version(4) compatible version(4)


def _snappy_decode(payload: bytes) -> Any:
    """Snappy as Kafka writes it: xerial framing (int32 block length + raw block)*, or raw snappy.

    Returns a bytes-like object (``bytes``, ``bytearray`` or cramjam's ``Buffer``).
    With cramjam the blocks are decompressed straight into one preallocated
    ``bytearray`` (no per-block objects, no join).
    """
    if _snappy_raw is None:
        raise CodecMissing("snappy codec not installed (pip install cramjam or python-snappy)")
    if len(payload) <= _XERIAL_HEADER_LEN or payload[:8] != _XERIAL_MAGIC:
        return read_only(_snappy_raw(payload))
    view = memoryview(payload)
    blocks = []
    pos, end = _XERIAL_HEADER_LEN, len(payload)
    while pos < end:
        if pos + 4 > end:
            raise ValueError("xerial snappy block length cut short")
        block_len = _INT32.unpack_from(payload, pos)[0]
        pos += 4
        if block_len < 0 or pos + block_len > end:
            raise ValueError(f"xerial snappy block of {block_len} bytes overruns the payload")
        blocks.append(view[pos:pos + block_len])
        pos += block_len
    if _snappy_into is None:
        return b"".join(_snappy_raw(block) for block in blocks)
    if len(blocks) == 1:
        return read_only(_snappy_raw(blocks[0]))
    length_of, decompress_into = _snappy_into
    sizes = [length_of(block) for block in blocks]
    out = bytearray(sum(sizes))
    target = memoryview(out)
    at = 0
    for block, size in zip(blocks, sizes):
        if decompress_into(block, target[at:at + size]) != size:
            raise ValueError("snappy block decompressed to fewer bytes than its header says")
        at += size
    return read_only(out)


def read_only(buffer: Any) -> Any:
    """A read-only view of a private decompression buffer (the C decoder copies out of those without the GIL)."""
    return buffer if type(buffer) is bytes else memoryview(buffer).toreadonly()


def _lz4_frame_decode(payload: bytes) -> bytes:
    """A standard LZ4 frame (magic-1 messages, Kafka 0.10+)."""
    if _lz4_frame is None:
        raise CodecMissing("lz4 codec not installed (pip install lz4)")
    return _lz4_frame(payload)


_LZ4_FRAME_MAGIC = b"\x04\x22\x4d\x18"
#: Frame descriptor (FLG..) -> its correct header checksum byte; Kafka writes the same few descriptors.
_lz4_header_checksums: Dict[bytes, int] = {}


def _lz4_decode_kafka08(payload: bytes) -> bytes:
    """An LZ4 frame as Kafka 0.8/0.9 wrote it (magic 0).

    Those versions computed the frame header checksum over the magic number as
    well as the descriptor (KAFKA-3160), which standard decoders reject. The
    checksum protects nothing a CRC-checked message does not, so recompute the
    correct one (memoised per descriptor) and decode normally; correct frames
    pass unchanged.
    """
    if _lz4_frame is None:
        raise CodecMissing("lz4 codec not installed (pip install lz4)")
    if len(payload) < 7 or payload[:4] != _LZ4_FRAME_MAGIC:
        raise ValueError("not an LZ4 frame")
    flags = payload[4]
    descriptor_end = 6 + (8 if flags & 0x08 else 0) + (4 if flags & 0x01 else 0)
    if len(payload) <= descriptor_end:
        raise ValueError("LZ4 frame header cut short")
    descriptor = payload[4:descriptor_end]
    checksum = _lz4_header_checksums.get(descriptor)
    if checksum is None:
        checksum = (xxh32(descriptor) >> 8) & 0xFF
        if len(_lz4_header_checksums) < 64:  # content sizes make descriptors vary; keep the cache small
            _lz4_header_checksums[descriptor] = checksum
    if payload[descriptor_end] != checksum:
        payload = b"".join((payload[:descriptor_end], bytes((checksum,)), payload[descriptor_end + 1:]))
    return _lz4_frame(payload)


_P1, _P2, _P3, _P4, _P5 = 2654435761, 2246822519, 3266489917, 668265263, 374761393
_M32 = 0xFFFFFFFF


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & _M32


def _round(acc: int, lane: int) -> int:
    return (_rotl((acc + lane * _P2) & _M32, 13) * _P1) & _M32


def xxh32(data: bytes, seed: int = 0) -> int:
    """XXH32 of ``data`` (pure Python; used only on LZ4 frame headers, a few bytes long).

    >>> hex(xxh32(b""))
    '0x2cc5d05'
    """
    n = len(data)
    pos = 0
    if n >= 16:
        v = [(seed + _P1 + _P2) & _M32, (seed + _P2) & _M32, seed & _M32, (seed - _P1) & _M32]
        while pos + 16 <= n:
            lanes = struct.unpack_from("<4I", data, pos)
            v = [_round(v[i], lanes[i]) for i in range(4)]
            pos += 16
        acc = (_rotl(v[0], 1) + _rotl(v[1], 7) + _rotl(v[2], 12) + _rotl(v[3], 18)) & _M32
    else:
        acc = (seed + _P5) & _M32
    acc = (acc + n) & _M32
    while pos + 4 <= n:
        lane = struct.unpack_from("<I", data, pos)[0]
        acc = (_rotl((acc + lane * _P3) & _M32, 17) * _P4) & _M32
        pos += 4
    while pos < n:
        acc = (_rotl((acc + data[pos] * _P5) & _M32, 11) * _P1) & _M32
        pos += 1
    acc ^= acc >> 15
    acc = (acc * _P2) & _M32
    acc ^= acc >> 13
    acc = (acc * _P3) & _M32
    acc ^= acc >> 16
    return acc
