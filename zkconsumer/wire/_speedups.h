/*
 * _speedups.h: what the source files of the C extension zkconsumer.wire._speedups share
 * (setup.py builds them as one extension; docs of each function are in its file):
 *
 *   _speedups.c          the module: its functions, types and constants (PyInit__speedups)
 *   _speedups_crc.c      CRC-32 (zlib's), by carry-less multiplication or tables
 *   _speedups_scan.c     walking a message set: validation, counting, filling a block
 *   _speedups_block.c    MessageBlock (a chunk's messages in Arrow layout), its recycled buffers
 *   _speedups_decode.c   decode(), decode_inner(), concat(): message sets into MessageBlocks
 *   _speedups_cursor.c   Cursor, the per-message engine of zkconsumer.consumer.stream.ConsumerIterator
 *   _speedups_recv.c     recv_exactly(), recv_frame(): socket reads without the GIL
 *   _speedups_fetch.c    fetch_response(), fetch_walk(), fetch_request(): a Fetch response body read (and walked), a request written
 *   _speedups_arrow.c    arrow_batch(): a MessageBlock's rows as an Arrow record batch (C data interface)
 *
 * Everything here has a pure-Python equivalent (zkconsumer.wire.messageset,
 * zkconsumer.consumer.stream, zkconsumer.wire.connection); the package works (slower)
 * when this extension is not built.
 */
#ifndef ZKCONSUMER_SPEEDUPS_H
#define ZKCONSUMER_SPEEDUPS_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <stdint.h>
#include <string.h>

#if PY_VERSION_HEX < 0x030A0000  /* Python 3.9 */
static inline PyObject *Py_NewRef(PyObject *o) { Py_INCREF(o); return o; }
static inline int PyModule_AddObjectRef(PyObject *m, const char *name, PyObject *value) {
    Py_INCREF(value);
    if (PyModule_AddObject(m, name, value) < 0) {
        Py_DECREF(value);
        return -1;
    }
    return 0;
}
#endif

/* How a scan of a message set ended: decode()'s status, the module's END..CORRUPT. */
#define ST_END 0
#define ST_TRUNCATED 1
#define ST_WRAPPER 2
#define ST_CORRUPT 3

/* Kafka's message-set entry: offset (8) and size (4), then the message: CRC (4), magic, attributes,
 * [timestamp (8), magic 1], key length (4), key, value length (4), value; the CRC covers from magic on. */
#define LOG_OVERHEAD 12
#define MIN_MESSAGE_V0 14
#define MIN_MESSAGE_V1 22
#define CRC_START 16

/* Big-endian integers of the wire. */
static inline int64_t be64(const unsigned char *p) {
    uint64_t v = ((uint64_t)p[0] << 56) | ((uint64_t)p[1] << 48) | ((uint64_t)p[2] << 40) | ((uint64_t)p[3] << 32) |
                 ((uint64_t)p[4] << 24) | ((uint64_t)p[5] << 16) | ((uint64_t)p[6] << 8) | (uint64_t)p[7];
    return (int64_t)v;
}

static inline uint32_t be32u(const unsigned char *p) {
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | (uint32_t)p[3];
}

static inline int32_t be32(const unsigned char *p) { return (int32_t)be32u(p); }

/* ------------------------------------------------------------------------ CRC-32: _speedups_crc.c */

void crc_init(void);                                       /* once, before crc32_of */
uint32_t crc32_of(const unsigned char *p, Py_ssize_t n);   /* zlib.crc32(p[0..n)) */
const char *crc32_implementation(void);                    /* "pclmul" or "tables" */
PyObject *py_crc32(PyObject *module, PyObject *arg);

/* ------------------------------------------------------------------------ MessageBlock: _speedups_block.c */

typedef struct {
    PyObject_HEAD
    Py_ssize_t n;
    Py_ssize_t key_nulls, value_nulls;
    PyObject *offsets;       /* bytes: int64[n] */
    PyObject *key_offsets;   /* bytes: int32[n + 1] */
    PyObject *key_data;      /* bytes */
    PyObject *key_validity;  /* bytes (bitmap, 1 = valid) or None when no key is null */
    PyObject *value_offsets;
    PyObject *value_data;
    PyObject *value_validity;
    /* cached pointers into the bytes above */
    int64_t *off;
    int32_t *koff, *voff;
    const char *kdata, *vdata;
    const uint8_t *kvalid, *vvalid;
} MessageBlock;

extern PyTypeObject MessageBlockType;
extern PyTypeObject BlockBufferType;

/* A block with room for n messages and the given data sizes; buffers uninitialised except validity. */
MessageBlock *block_alloc(Py_ssize_t n, Py_ssize_t key_bytes, Py_ssize_t value_bytes,
                          Py_ssize_t key_nulls, Py_ssize_t value_nulls);

static inline int key_is_null(const MessageBlock *b, Py_ssize_t i) {
    if (b->key_nulls == 0) return 0;
    if (b->key_nulls == b->n) return 1;
    return !(b->kvalid[i >> 3] & (1u << (i & 7)));
}

static inline int value_is_null(const MessageBlock *b, Py_ssize_t i) {
    if (b->value_nulls == 0) return 0;
    if (b->value_nulls == b->n) return 1;
    return !(b->vvalid[i >> 3] & (1u << (i & 7)));
}

/* ------------------------------------------------------------------------ scanning: _speedups_scan.c */

typedef struct {
    const unsigned char *data;
    Py_ssize_t start, end;
    int top_level;
    /* results of the validating pass */
    Py_ssize_t stop;
    int status;
    int64_t bad_offset;
    char reason[200];
    Py_ssize_t entries;     /* complete, valid, uncompressed entries in [start, stop) */
    int64_t last_raw;       /* raw offset of the last of them */
    /* results of the counting pass (messages kept after the filter) */
    Py_ssize_t kept, key_bytes, value_bytes, key_nulls, value_nulls;
} scan_t;

void scan_validate(scan_t *s);
void scan_count(scan_t *s, int64_t delta, int64_t fetch_offset);
void scan_fill(const scan_t *s, int64_t delta, int64_t fetch_offset, MessageBlock *b);
void scan_fill_at(const scan_t *s, int64_t delta, int64_t fetch_offset, MessageBlock *b,
                  Py_ssize_t *i_io, int32_t *kpos_io, int32_t *vpos_io);

/* ------------------------------------------------------------------------ decoding: _speedups_decode.c */

PyObject *py_decode(PyObject *module, PyObject *args);
PyObject *py_decode_inner(PyObject *module, PyObject *args);
PyObject *py_concat(PyObject *module, PyObject *arg);

/* ------------------------------------------------------------------------ Cursor: _speedups_cursor.c */

extern PyTypeObject CursorType;
int cursor_init_module(void);                              /* once: the attribute names it looks up */

/* ------------------------------------------------------------------------ socket receive: _speedups_recv.c */

PyObject *py_recv_exactly(PyObject *module, PyObject *args);
PyObject *py_recv_frame(PyObject *module, PyObject *args);

/* ------------------------------------------------------------------------ Fetch responses: _speedups_fetch.c */

PyObject *py_fetch_response(PyObject *module, PyObject *args);
PyObject *py_fetch_walk(PyObject *module, PyObject *args);
PyObject *py_fetch_request(PyObject *module, PyObject *args);
/* ------------------------------------------------------------------------ Arrow batches: _speedups_arrow.c */
PyObject *py_arrow_batch(PyObject *module, PyObject *args);

#endif
