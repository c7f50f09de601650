/*
 * zkconsumer.wire._speedups: the optional C accelerator of zkconsumer.wire.messageset,
 * zkconsumer.consumer.stream and zkconsumer.wire.connection. Everything here has a
 * pure-Python equivalent; the package works (slower) when this extension is not built.
 * This file is the module (its functions, types and constants); the concerns are in
 * _speedups_*.c, listed in _speedups.h. Types for mypy: _speedups.pyi.
 *
 * decode(buffer, start, fetch_offset, top_level, wrapper_offset)
 *     Walks the message-set entries of ``buffer`` from byte ``start`` with the
 *     exact rules of zkconsumer.wire.messageset._decode_entries (CRC, magic 0/1, key/value
 *     bounds, truncated tail), with the GIL released, and returns
 *     ``(block, stop, next_offset, status, bad_offset, reason)``:
 *       block        a MessageBlock of the uncompressed messages with
 *                    offset >= fetch_offset found in [start, stop)
 *       stop         byte position after the last complete, valid entry
 *       next_offset  offset after the last such entry, or None if none
 *       status       0 end of buffer, 1 truncated tail, 2 a compressed wrapper
 *                    starts at ``stop`` (top level only), 3 corrupt entry at ``stop``
 *       bad_offset   the offset of the entry at ``stop`` (status 2 and 3; -1 unknown)
 *       reason       why the entry at ``stop`` is corrupt (status 3), else None
 *     Inside a wrapper (top_level false) a nested wrapper or a truncated tail is
 *     corrupt. ``wrapper_offset`` (magic-1 wrappers) makes offsets relative:
 *     absolute = wrapper_offset - last relative offset + relative offset.
 *
 * decode_inner(sets, fetch_offset)
 *     The decompressed inner sets of consecutive compressed wrappers, each a
 *     ``(read-only buffer, wrapper_offset or None)``, validated as decode(...,
 *     top_level=False) does and decoded into ONE MessageBlock (no block per
 *     wrapper, no concat); ``(block, -1, None)``, or ``(None, k, reason)`` if set
 *     k is corrupt. Runs without the GIL for large input.
 *
 * MessageBlock
 *     The messages of one chunk in Arrow layout: int64 offsets, and for keys
 *     and values int32 offsets + data + validity bitmap, each a ``bytes``
 *     object, so pyarrow wraps them without copying. As a Python sequence it
 *     is a read-only list of ``(offset, key, value)`` tuples.
 *
 * Cursor
 *     The per-message engine of zkconsumer.consumer.stream.ConsumerIterator (which
 *     subclasses it):
 *     ``__next__`` hands out the installed chunk's messages as
 *     MessageAndMetadata tuples, skipping offsets below the partition's
 *     ``consumed_offset`` and advancing it per message; when the chunk is
 *     exhausted it calls ``self._refill()`` (Python: queue, epoch, errors,
 *     timeouts, shutdown). A message is committed (position, consumed_offset,
 *     counters) only if no ``_clear()``/``_install()`` ran while its objects
 *     were being built, so a rebalance that cleared the stream never sees a
 *     message from the cleared chunk handed out afterwards. Every state change
 *     happens while holding the GIL without running Python code in between.
 *
 * recv_exactly(fd, buffer, timeout_ms), recv_frame(fd, buffer, timeout_ms, request=None, lowat=0)
 *     Socket reads (recv_frame: a request sent, then a size-prefixed frame read) with
 *     the GIL released throughout; see _speedups_recv.c.
 *
 * fetch_response(body, item_type), fetch_request(correlation_id, client_id, max_wait_ms, min_bytes, partitions)
 *     The partitions of a Fetch v0 response body, read as
 *     zkconsumer.wire.protocol.FetchRequest.decode_response reads them, and a Fetch v0 request
 *     frame, byte for byte as FetchRequest.encode_frame writes it; see _speedups_fetch.c.
 *
 * fetch_walk(body, item_type, requested)
 *     A Fetch v0 response body read as fetch_response reads it and walked for a fetcher, as
 *     zkconsumer.wire.fetch_walk.walk_partitions walks it; see _speedups_fetch.c.
 *
 * arrow_batch(block, topic, partition, start, stop, import_from_c, schema)
 *     Rows of a MessageBlock as a record batch of zkconsumer.consumer.arrow's schema, handed
 *     to pyarrow through the Arrow C data interface; see _speedups_arrow.c.
 *
 * crc32(data)
 *     zlib.crc32(data) with the decoder's implementation (CRC32_IMPLEMENTATION names it),
 *     for tests; see _speedups_crc.c.
 */

#include "_speedups.h"

static PyMethodDef module_methods[] = {
    {"recv_exactly", py_recv_exactly, METH_VARARGS,
     "recv_exactly(fd, buffer, timeout_ms) -> bytes read (< len(buffer) only at EOF, -1 on timeout); the GIL is released throughout"},
    {"recv_frame", py_recv_frame, METH_VARARGS,
     "recv_frame(fd, buffer, timeout_ms, request=None, lowat=0) -> (state, size, body bytes read, SO_RCVLOWAT left):\n"
     "request sent (if given), then a size-prefixed frame read, in one GIL release"},
    {"crc32", py_crc32, METH_O, "crc32(data) -> zlib.crc32(data), with the decoder's implementation"},
    {"decode_inner", py_decode_inner, METH_VARARGS,
     "decode_inner(sets, fetch_offset) -> (block, bad_index, reason): the inner sets of consecutive wrappers as one block"},
    {"decode", py_decode, METH_VARARGS,
     "decode(buffer, start, fetch_offset, top_level, wrapper_offset=None)\n"
     "-> (block, stop, next_offset, status, bad_offset, reason); see _speedups.c"},
    {"fetch_response", py_fetch_response, METH_VARARGS,
     "fetch_response(body, item_type) -> [item_type(topic, partition, error, high_watermark, message_set)] or None\n"
     "(None: a body the Python decoder refuses); see _speedups_fetch.c"},
    {"fetch_walk", py_fetch_walk, METH_VARARGS,
     "fetch_walk(body, item_type, requested) -> (size, largest, [(state, offset, item)]) or None: a Fetch response\n"
     "read and walked for a fetcher; see _speedups_fetch.c"},
    {"fetch_request", py_fetch_request, METH_VARARGS,
     "fetch_request(correlation_id, client_id, max_wait_ms, min_bytes, partitions) -> the Fetch v0 request frame,\n"
     "or None (a request the Python encoder must write or refuse); see _speedups_fetch.c"},
    {"arrow_batch", py_arrow_batch, METH_VARARGS,
     "arrow_batch(block, topic, partition, start, stop, import_from_c, schema) -> rows [start, stop) of the block\n"
     "as a record batch, through Arrow's C data interface; see _speedups_arrow.c"},
    {"concat", py_concat, METH_O, "concat(blocks) -> one MessageBlock with the messages of all, in order"},
    {NULL}
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "zkconsumer.wire._speedups",
    "Optional C accelerator of zkconsumer.wire.messageset, zkconsumer.consumer.stream and zkconsumer.wire.connection.", -1, module_methods,
};

PyMODINIT_FUNC PyInit__speedups(void) {
    PyObject *m;
    crc_init();
    if (cursor_init_module() < 0) return NULL;
    if (PyType_Ready(&MessageBlockType) < 0 || PyType_Ready(&CursorType) < 0 ||
        PyType_Ready(&BlockBufferType) < 0) return NULL;
    m = PyModule_Create(&module_def);
    if (m == NULL) return NULL;
    if (PyModule_AddObjectRef(m, "MessageBlock", (PyObject *)&MessageBlockType) < 0 ||
        PyModule_AddObjectRef(m, "Cursor", (PyObject *)&CursorType) < 0 ||
        PyModule_AddIntConstant(m, "END", ST_END) < 0 ||
        PyModule_AddIntConstant(m, "TRUNCATED", ST_TRUNCATED) < 0 ||
        PyModule_AddIntConstant(m, "WRAPPER", ST_WRAPPER) < 0 ||
        PyModule_AddIntConstant(m, "CORRUPT", ST_CORRUPT) < 0 ||
        PyModule_AddStringConstant(m, "CRC32_IMPLEMENTATION", crc32_implementation()) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
