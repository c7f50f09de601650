"""Decoding Kafka message sets (message format magic 0 and 1) into ``RawMessage`` tuples.

A message set is what a Fetch response carries per partition: a sequence of
*entries*::

    offset:int64  size:int32  message(size bytes)

    message = crc:uint32  magic:int8  attributes:int8  [timestamp:int64 if magic 1]
              key_length:int32  key  value_length:int32  value        (-1 length = null)

``crc`` is the CRC-32 (zlib's) of everything after it. ``attributes & 0x07``
names a compression codec (1 gzip, 2 snappy, 3 lz4); a compressed message is a
*wrapper* whose value is a whole message set, compressed. For magic 0 the inner
offsets are absolute; for magic 1 they are relative: the wrapper's offset is
the absolute offset of the *last* inner message, so
``inner absolute = wrapper offset - last inner relative + relative``.

Rules (Kafka's ``ByteBufferMessageSet`` iterators, made explicit):

* The broker cuts a fetch at ``max_bytes``, so the last entry is often
  incomplete: a truncated *trailing* entry is normal and dropped.
* If the buffer holds bytes but not one complete entry, the entry at the fetch
  offset is larger than the fetch size: :attr:`DecodedMessageSet.too_large` is
  true and the caller reports ``MessageSizeTooLargeError``.
* Messages with ``offset < fetch_offset`` are dropped (a compressed wrapper
  fetched mid-way still contains its earlier messages).
* A CRC mismatch or malformed entry raises :class:`~zkconsumer.errors.CorruptMessageError`
  naming topic, partition and offset, **if it is met before any message was
  decoded**. Met after some messages, decoding stops in front of the bad entry
  and returns the good prefix (like a truncated tail): a fetcher hands those
  out, fetches again from the bad entry and then gets the error, so the
  application sees every good message and then the error, in offset order.

Worked example::

    >>> from kafka.record.legacy_records import LegacyRecordBatchBuilder
    >>> b = LegacyRecordBatchBuilder(magic=0, compression_type=0, batch_size=1 << 20)
    >>> for i in range(3): _ = b.append(i + 10, None, None, b"v%d" % i)
    >>> data = bytes(b.build())
    >>> r = decode_message_set(data[:-3], "t", 0, fetch_offset=11)   # cut inside the last entry
    >>> list(r.messages), r.next_offset, r.too_large
    ([(11, None, b'v1')], 12, False)

Two implementations, one contract:

* the optional C extension :mod:`zkconsumer.wire._speedups` (built by ``setup.py``
  when a compiler is available) walks the entries with the GIL released for
  large sets and returns the messages as a :class:`MessageBlock`: one chunk in
  Arrow layout (int64 offsets; keys and values as int32 offsets + data +
  validity bitmap, each a ``bytes`` object), which is also a read-only
  sequence of ``(offset, key, value)`` tuples built on access. Per message it
  costs a header parse, a CRC (zlib's) and two ``memcpy``; no Python object is
  made until the message is handed out. Compressed wrappers are decompressed
  here by the codec libraries (zlib, cramjam/python-snappy, lz4), which release
  the GIL while they work; the inner sets of a run of wrappers are then decoded
  in C into one block, also without the GIL when large.
* :func:`decode_message_set_python`, the pure-Python reference, returns a list
  of tuples. It is used when the extension is missing or when the environment
  variable ``ZKCONSUMER_PURE_PYTHON`` is set (non-empty, not ``0``).

:data:`ACCELERATED` says which one :func:`decode_message_set` uses. Callers
only rely on ``messages`` being a sequence of ``(offset, key, value)``.
"""

from __future__ import annotations

import os
import struct
import zlib
from typing import TYPE_CHECKING, Any, Callable, List, NamedTuple, Optional, Protocol, Sequence, Tuple, Type, Union

from ..errors import CorruptMessageError
from .codecs import CODEC_NAMES, CodecMissing, decompress, read_only

if TYPE_CHECKING:  # the stub's types (whether or not the extension is built)
    from . import _speedups as _speedups_types

#: One decoded message: ``(offset, key, value)`` (what fetchers hand to the streams' queues).
RawMessage = Tuple[int, Optional[bytes], Optional[bytes]]

__all__ = ["ACCELERATED", "DecodedMessageSet", "MessageBlock", "decode_message_set", "decode_message_set_python", "speedups",
           "UnsupportedCompressionError"]


class Speedups(Protocol):
    """The C extension :mod:`zkconsumer.wire._speedups` as the Python modules use it.

    Its types and contracts are in ``_speedups.pyi`` and ``_speedups*.c``; mypy checks that the
    module (typed by that stub) is a ``Speedups`` where :func:`_load_speedups` returns it.
    """

    @property
    def END(self) -> int: ...
    @property
    def TRUNCATED(self) -> int: ...
    @property
    def WRAPPER(self) -> int: ...
    @property
    def CORRUPT(self) -> int: ...
    @property
    def CRC32_IMPLEMENTATION(self) -> str: ...
    @property
    def MessageBlock(self) -> Type[_speedups_types.MessageBlock]: ...
    @property
    def Cursor(self) -> Type[_speedups_types.Cursor]: ...
    def crc32(self, data: Buffer, /) -> int: ...
    def decode(self, buffer: Buffer, start: int, fetch_offset: int, top_level: bool,
               wrapper_offset: Optional[int] = ..., /) -> Tuple[Any, ...]: ...
    def decode_inner(self, sets: Sequence[Tuple[Buffer, Optional[int]]], fetch_offset: int, /) -> Tuple[Any, ...]: ...
    def concat(self, blocks: Sequence[_speedups_types.MessageBlock], /) -> _speedups_types.MessageBlock: ...
    def recv_exactly(self, fd: int, buffer: Buffer, timeout_ms: int, /) -> int: ...
    def recv_frame(self, fd: int, buffer: Buffer, timeout_ms: int, request: Optional[bytes] = None, lowat: int = 0, /
                   ) -> Tuple[int, int, int, int]: ...
    def fetch_response(self, body: Buffer, item_type: Any, /) -> Optional[List[Any]]: ...
    def fetch_request(self, correlation_id: int, client_id: Optional[str], max_wait_ms: int, min_bytes: int,
                      partitions: Sequence[Any], /) -> Optional[bytes]: ...
    def arrow_batch(self, block: _speedups_types.MessageBlock, topic: str, partition: int, start: int, stop: int,
                    import_from_c: Callable[[int, Any], Any], schema: Any, /) -> Any: ...


def _load_speedups() -> Optional[Speedups]:
    """The C extension, or ``None`` if it is not built or ``ZKCONSUMER_PURE_PYTHON`` asks for pure Python."""
    if os.environ.get("ZKCONSUMER_PURE_PYTHON", "") not in ("", "0"):
        return None
    try:
        from . import _speedups
    except ImportError:
        return None
    return _speedups


_speedups = _load_speedups()
#: The loaded C extension module, or ``None`` (shared with the other wire modules).
speedups: Optional[Speedups] = _speedups
#: True when :func:`decode_message_set` (and the stream iterator) use the C extension.
ACCELERATED = _speedups is not None
#: The type of ``DecodedMessageSet.messages`` produced by the C decoder (``None`` without it).
MessageBlock: Optional[Type[_speedups_types.MessageBlock]] = _speedups.MessageBlock if _speedups is not None else None

Buffer = Union[bytes, bytearray, memoryview]

CODEC_MASK = 0x07
CODEC_NONE, CODEC_GZIP, CODEC_SNAPPY, CODEC_LZ4 = 0, 1, 2, 3

#: offset, size, crc, magic, attributes, key length (magic 0 layout; 22 bytes).
_ENTRY_V0 = struct.Struct(">qiIbbi")
#: offset, size, crc, magic, attributes, timestamp, key length (magic 1 layout; 30 bytes).
_ENTRY_V1 = struct.Struct(">qiIbbqi")
_OFFSET_SIZE = struct.Struct(">qi")
_INT32 = struct.Struct(">i")
#: size, crc, magic, attributes (bytes 8..18 of an entry).
_WRAPPER_HEAD = struct.Struct(">iIbb")
_LOG_OVERHEAD = 12          # offset + size
_MIN_MESSAGE_V0 = 14        # crc, magic, attributes, key length, value length
_MIN_MESSAGE_V1 = 22        # ... plus the timestamp
_CRC_START = 16             # crc covers the message from the magic byte on
_NO_FILTER = -(1 << 63)


class UnsupportedCompressionError(CorruptMessageError):
    """A wrapper uses a codec this process cannot decompress (library missing, or unknown codec)."""


class DecodedMessageSet(NamedTuple):
    """What :func:`decode_message_set` found in one partition's message set.

    ``messages``: complete messages with ``offset >= fetch_offset``, ascending: a
    sequence of ``(offset, key, value)`` (a :class:`MessageBlock` from the C
    decoder, a list from the Python one; both compare equal to a list).
    ``valid_bytes``: length of the prefix made of complete, valid entries.
    ``size``: length of the whole buffer.
    ``next_offset``: the offset after the last complete entry (for a compressed
    wrapper, after its last inner message); ``fetch_offset`` if there was none.
    """

    messages: Sequence[RawMessage]
    valid_bytes: int
    size: int
    next_offset: int

    @property
    def too_large(self) -> bool:
        """The buffer held bytes but not one complete entry (the message at the fetch offset is over the fetch size)."""
        return self.size > 0 and self.valid_bytes == 0


class _Corrupt(Exception):
    """Internal: decoding met a bad entry at byte ``pos`` with offset ``offset``."""

    def __init__(self, pos: int, offset: int, reason: str, unsupported: bool = False) -> None:
        super().__init__(reason)
        self.pos, self.offset, self.reason, self.unsupported = pos, offset, reason, unsupported


#: What the C extension's ``decode(buf, 0, fetch_offset, True)`` returns: ``(block, stop, next_offset, status,
#: bad_offset, reason)``.
DecodeResult = Tuple[Any, ...]


def decode_message_set(buf: Buffer, topic: str, partition: int, fetch_offset: int,
                       first: Optional[DecodeResult] = None) -> DecodedMessageSet:
    """Decode the message set ``buf`` fetched for ``topic``/``partition`` at ``fetch_offset``.

    Contract: see the module docstring. Keys and values are ``bytes`` or ``None``.
    ``first``: what the C extension's ``decode(buf, 0, fetch_offset, True)`` returned, if the caller asked it
    already (a fetcher queues plain messages straight from it, and passes it on for anything else); it is
    not decoded again.
    Raises :class:`~zkconsumer.errors.CorruptMessageError` (or its subclass
    :class:`UnsupportedCompressionError`) only when no message could be decoded
    before the bad entry.
    """
    native = _speedups
    if native is None:
        return decode_message_set_python(buf, topic, partition, fetch_offset)
    decode = native.decode
    if first is None:
        first = decode(buf, 0, fetch_offset, True)
    block, stop, next_offset, status, bad_offset, reason = first
    if status <= native.TRUNCATED:  # the common case: no wrapper, nothing corrupt
        return DecodedMessageSet(block, stop, len(buf), fetch_offset if next_offset is None else next_offset)
    if status == native.WRAPPER and not block and _HAS_DECODE_INNER:
        fast = _fast_wrappers(native, buf, stop, bad_offset, fetch_offset)
        if fast is not None:
            return fast
    blocks = [block] if block else []
    have = len(block)
    last = fetch_offset if next_offset is None else next_offset
    pos = stop
    try:
        while status == native.WRAPPER:
            inner, pos = _fast_wrapper(native, buf, pos, bad_offset, fetch_offset)
            if inner:
                blocks.append(inner)
                have += len(inner)
            last = bad_offset + 1
            block, stop, next_offset, status, bad_offset, reason = decode(buf, pos, fetch_offset, True)
            if block:
                blocks.append(block)
                have += len(block)
            if next_offset is not None:
                last = next_offset
            pos = stop
        if status == native.CORRUPT:
            raise _Corrupt(pos, bad_offset, reason)
    except _Corrupt as bad:
        if not have:
            cls = UnsupportedCompressionError if bad.unsupported else CorruptMessageError
            raise cls(topic, partition, bad.offset, bad.reason) from bad.__cause__
        messages = native.concat(blocks)
        return DecodedMessageSet(messages, bad.pos, len(buf), messages.offset_at(-1) + 1)
    messages = blocks[0] if len(blocks) == 1 else native.concat(blocks)
    return DecodedMessageSet(messages, pos, len(buf), last if pos else fetch_offset)


def _fast_wrappers(native: Speedups, buf: Buffer, pos: int, offset: int, fetch_offset: int) -> Optional[DecodedMessageSet]:
    """C path for a set made of compressed wrappers only (what Kafka's producers write).

    Decompresses each wrapper from byte ``pos`` on (the first at ``offset``) and
    decodes all the inner sets into one MessageBlock with one ``decode_inner``
    call: no block per wrapper, no concatenation. Returns ``None`` (nothing
    consumed; the caller decodes wrapper by wrapper) if anything is irregular:
    an uncompressed message between wrappers, a corrupt entry or inner set, a
    codec that cannot be decompressed. Then the general loop reports it exactly.
    """
    view = memoryview(buf).cast("B") if not isinstance(buf, (bytes, bytearray)) else buf
    decode = native.decode
    sets: List[Tuple[Any, Optional[int]]] = []
    status = native.WRAPPER
    last = fetch_offset
    while status == native.WRAPPER:
        size, _crc, magic, attributes = _WRAPPER_HEAD.unpack_from(view, pos + 8)
        key_pos = pos + (30 if magic else 22)
        key_len = _INT32.unpack_from(view, key_pos - 4)[0]
        value_len_pos = key_pos + max(key_len, 0)
        value_len = _INT32.unpack_from(view, value_len_pos)[0]
        value = None if value_len < 0 else bytes(view[value_len_pos + 4:value_len_pos + 4 + value_len])
        try:
            raw = _inflate(pos, offset, magic, attributes & CODEC_MASK, value)
        except _Corrupt:
            return None
        sets.append((read_only(raw), offset if magic >= 1 else None))
        last = offset + 1
        block, pos, next_offset, status, offset, _reason = decode(buf, pos + _LOG_OVERHEAD + size, fetch_offset, True)
        if block or status == native.CORRUPT:
            return None
        if next_offset is not None:  # uncompressed entries below the fetch offset between wrappers
            last = next_offset
    block, _bad, _reason = native.decode_inner(sets, fetch_offset)
    if block is None:
        return None
    return DecodedMessageSet(block, pos, len(buf), last)


_HAS_DECODE_INNER = _speedups is not None and hasattr(_speedups, "decode_inner")


def _fast_wrapper(native: Speedups, buf: Buffer, pos: int, offset: int, fetch_offset: int) -> Tuple[Any, int]:
    """C path: the inner messages (a MessageBlock) of the wrapper at ``pos``, and the byte after it.

    The C decoder already checked the wrapper's CRC and bounds.
    """
    view = memoryview(buf).cast("B") if not isinstance(buf, (bytes, bytearray)) else buf
    size, _crc, magic, attributes = _WRAPPER_HEAD.unpack_from(view, pos + 8)
    key_pos = pos + (30 if magic else 22)
    key_len = _INT32.unpack_from(view, key_pos - 4)[0]
    value_len_pos = key_pos + max(key_len, 0)
    value_len = _INT32.unpack_from(view, value_len_pos)[0]
    value = None if value_len < 0 else bytes(view[value_len_pos + 4:value_len_pos + 4 + value_len])
    raw = _inflate(pos, offset, magic, attributes & CODEC_MASK, value)
    inner, _stop, _next, status, _bad, reason = native.decode(
        raw, 0, fetch_offset, False, offset if magic >= 1 else None)
    if status == native.CORRUPT:
        raise _Corrupt(pos, offset, f"inside compressed message: {reason}")
    return inner, pos + _LOG_OVERHEAD + size


def decode_message_set_python(buf: Buffer, topic: str, partition: int, fetch_offset: int) -> DecodedMessageSet:
    """The pure-Python reference of :func:`decode_message_set` (same contract; ``messages`` is a list)."""
    # One copy of the set into an immutable bytes object makes every key/value a
    # single slice (cheaper per message than slicing a view and copying it).
    data = buf if type(buf) is bytes else bytes(buf)
    messages: List[RawMessage] = []
    try:
        valid, next_offset = _decode_entries(data, fetch_offset, messages, True)
    except _Corrupt as bad:
        if not messages:
            cls = UnsupportedCompressionError if bad.unsupported else CorruptMessageError
            raise cls(topic, partition, bad.offset, bad.reason) from bad.__cause__
        valid, next_offset = bad.pos, messages[-1][0] + 1
    return DecodedMessageSet(messages, valid, len(data), next_offset if valid else fetch_offset)


def _decode_entries(data: bytes, fetch_offset: int, out: List[RawMessage], top_level: bool) -> Tuple[int, int]:
    """Append the messages of ``data`` to ``out``; return ``(valid bytes, next offset)``.

    At top level a truncated trailing entry ends decoding quietly; inside a
    decompressed wrapper it is corruption, as is a nested wrapper.
    Raises :class:`_Corrupt` for a bad entry.
    """
    mv = memoryview(data)
    end = len(data)
    pos = 0
    next_offset = fetch_offset
    unpack_v0 = _ENTRY_V0.unpack_from
    unpack_i32 = _INT32.unpack_from
    crc32 = zlib.crc32
    append = out.append
    while pos + 22 <= end:
        offset, size, crc, magic, attributes, key_len = unpack_v0(data, pos)
        if size < _MIN_MESSAGE_V0:
            raise _Corrupt(pos, offset, f"message size {size} is below the minimum {_MIN_MESSAGE_V0}")
        msg_end = pos + 12 + size
        if msg_end > end:
            break
        if crc32(mv[pos + _CRC_START:msg_end]) != crc:
            raise _Corrupt(pos, offset, f"CRC mismatch (stored {crc}, computed {crc32(mv[pos + _CRC_START:msg_end])})")
        if magic == 0:
            key_pos = pos + 22
        else:
            key_pos, key_len = _v1_key(data, pos, offset, magic, size)
        if key_len < 0:
            key = None
            vlen_pos = key_pos
        else:
            vlen_pos = key_pos + key_len
            key = data[key_pos:vlen_pos]
        value_pos = vlen_pos + 4
        if value_pos > msg_end:
            raise _Corrupt(pos, offset, f"key length {key_len} overruns the message")
        value_len = unpack_i32(data, vlen_pos)[0]
        if value_len < 0:
            value = None
        else:
            value = data[value_pos:value_pos + value_len]
            if value_pos + value_len > msg_end:
                raise _Corrupt(pos, offset, f"value length {value_len} overruns the message")
        if attributes & CODEC_MASK:
            if not top_level:
                raise _Corrupt(pos, offset, "nested compressed message")
            out.extend(_wrapper_messages(pos, offset, magic, attributes & CODEC_MASK, value, fetch_offset))
        elif offset >= fetch_offset:
            append((offset, key, value))
        pos = msg_end
        next_offset = offset + 1
    if pos < end:
        _check_tail(data, pos, end, top_level)
    return pos, next_offset


def _v1_key(data: bytes, pos: int, offset: int, magic: int, size: int) -> Tuple[int, int]:
    """``(key position, key length)`` of a magic-1 message at ``pos``; other magics are corrupt."""
    if magic != 1:
        raise _Corrupt(pos, offset, f"unknown magic byte {magic}")
    if size < _MIN_MESSAGE_V1:
        raise _Corrupt(pos, offset, f"message size {size} is below the magic-1 minimum {_MIN_MESSAGE_V1}")
    return pos + 30, _ENTRY_V1.unpack_from(data, pos)[6]


def _check_tail(data: bytes, pos: int, end: int, top_level: bool) -> None:
    """Judge bytes after the last complete entry: a cut entry is fine at top level only."""
    if end - pos >= _LOG_OVERHEAD:
        offset, size = _OFFSET_SIZE.unpack_from(data, pos)
        if size < _MIN_MESSAGE_V0:
            raise _Corrupt(pos, offset, f"message size {size} is below the minimum {_MIN_MESSAGE_V0}")
    else:
        offset = -1
    if not top_level:
        raise _Corrupt(pos, offset, "compressed message set ends inside a message")


def _wrapper_messages(pos: int, offset: int, magic: int, codec: int, value: Optional[bytes],
                      fetch_offset: int) -> List[RawMessage]:
    """The inner messages of the compressed wrapper at byte ``pos``, absolute offsets, ``>= fetch_offset``."""
    raw = _inflate(pos, offset, magic, codec, value)
    inner: List[RawMessage] = []
    try:
        _decode_entries(raw if type(raw) is bytes else bytes(raw), _NO_FILTER, inner, False)
    except _Corrupt as bad:
        raise _Corrupt(pos, offset, f"inside compressed message: {bad.reason}") from None
    if magic >= 1 and inner:
        base = offset - inner[-1][0]
        return [(base + o, k, v) for o, k, v in inner if base + o >= fetch_offset]
    if inner and inner[0][0] < fetch_offset:
        return [m for m in inner if m[0] >= fetch_offset]
    return inner


def _inflate(pos: int, offset: int, magic: int, codec: int, value: Optional[bytes]) -> Any:
    """The decompressed inner message set of the wrapper at byte ``pos``; raises :class:`_Corrupt`."""
    if value is None:
        raise _Corrupt(pos, offset, "compressed message has a null value")
    try:
        return decompress(codec, magic, value)
    except CodecMissing as exc:
        raise _Corrupt(pos, offset, str(exc), unsupported=True) from None
    except Exception as exc:  # every codec library has its own error types
        raise _Corrupt(pos, offset, f"{CODEC_NAMES.get(codec, codec)} decompression failed: {exc!r}") from exc
