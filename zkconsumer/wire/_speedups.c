/*
 * zkconsumer._speedups: the optional C accelerator of zkconsumer.messageset and
 * zkconsumer.consumer.stream. Everything here has a pure-Python equivalent; the package
 * works (slower) when this extension is not built.
 *
 * decode(buffer, start, fetch_offset, top_level, wrapper_offset)
 *     Walks the message-set entries of ``buffer`` from byte ``start`` with the
 *     exact rules of messageset._decode_entries (CRC, magic 0/1, key/value
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
 *     The per-message engine of stream.ConsumerIterator (which subclasses it):
 *     ``__next__`` hands out the installed chunk's messages as
 *     MessageAndMetadata tuples, skipping offsets below the partition's
 *     ``consumed_offset`` and advancing it per message; when the chunk is
 *     exhausted it calls ``self._refill()`` (Python: queue, epoch, errors,
 *     timeouts, shutdown). A message is committed (position, consumed_offset,
 *     counters) only if no ``_clear()``/``_install()`` ran while its objects
 *     were being built, so a rebalance that cleared the stream never sees a
 *     message from the cleared chunk handed out afterwards. Every state change
 *     happens while holding the GIL without running Python code in between.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <stdint.h>
#include <string.h>
#include <errno.h>
#include <poll.h>
#include <limits.h>
#include <sys/socket.h>

#if PY_VERSION_HEX < 0x030A0000  /* Python 3.9 */
static inline PyObject *Py_NewRef(PyObject *o) { Py_INCREF(o); return o; }
static int PyModule_AddObjectRef(PyObject *m, const char *name, PyObject *value) {
    Py_INCREF(value);
    if (PyModule_AddObject(m, name, value) < 0) {
        Py_DECREF(value);
        return -1;
    }
    return 0;
}
#endif

#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
#define HAVE_CLMUL_CRC 1
#include <immintrin.h>
#include <wmmintrin.h>
#endif

#define ST_END 0
#define ST_TRUNCATED 1
#define ST_WRAPPER 2
#define ST_CORRUPT 3

#define LOG_OVERHEAD 12
#define MIN_MESSAGE_V0 14
#define MIN_MESSAGE_V1 22
#define CRC_START 16

static inline int64_t be64(const unsigned char *p) {
    uint64_t v = ((uint64_t)p[0] << 56) | ((uint64_t)p[1] << 48) | ((uint64_t)p[2] << 40) | ((uint64_t)p[3] << 32) |
                 ((uint64_t)p[4] << 24) | ((uint64_t)p[5] << 16) | ((uint64_t)p[6] << 8) | (uint64_t)p[7];
    return (int64_t)v;
}

static inline uint32_t be32u(const unsigned char *p) {
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | (uint32_t)p[3];
}

static inline int32_t be32(const unsigned char *p) { return (int32_t)be32u(p); }

/* ------------------------------------------------------------------------ CRC-32 (IEEE, zlib's)
 * Kafka's message CRC is zlib's CRC-32. zlib's own crc32() manages ~0.4 GB/s on
 * the ~110-byte inputs of small messages, which made it most of the decoding
 * time; here: carry-less-multiply folding (x86 PCLMULQDQ, chosen at run time)
 * for the 16-byte blocks of inputs of 64 bytes or more, slicing-by-8 tables for
 * the rest and on other CPUs. Tested against zlib.crc32 for every length. */

static uint32_t crc_table[8][256];

static void crc_init(void) {
    int i, k;
    for (i = 0; i < 256; i++) {
        uint32_t c = (uint32_t)i;
        for (k = 0; k < 8; k++) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        crc_table[0][i] = c;
    }
    for (i = 0; i < 256; i++)
        for (k = 1; k < 8; k++)
            crc_table[k][i] = (crc_table[k - 1][i] >> 8) ^ crc_table[0][crc_table[k - 1][i] & 0xff];
}

/* Update the internal (inverted) state c with n bytes. */
static inline uint32_t crc_tables(uint32_t c, const unsigned char *p, Py_ssize_t n) {
    while (n >= 8) {
        uint32_t a, b;
        memcpy(&a, p, 4);
        memcpy(&b, p + 4, 4);
#if defined(WORDS_BIGENDIAN)
        a = __builtin_bswap32(a);
        b = __builtin_bswap32(b);
#endif
        a ^= c;
        c = crc_table[7][a & 0xff] ^ crc_table[6][(a >> 8) & 0xff] ^ crc_table[5][(a >> 16) & 0xff] ^
            crc_table[4][a >> 24] ^ crc_table[3][b & 0xff] ^ crc_table[2][(b >> 8) & 0xff] ^
            crc_table[1][(b >> 16) & 0xff] ^ crc_table[0][b >> 24];
        p += 8;
        n -= 8;
    }
    while (n-- > 0) c = crc_table[0][(c ^ *p++) & 0xff] ^ (c >> 8);
    return c;
}

#ifdef HAVE_CLMUL_CRC
static int have_clmul = 0;

/* Intel's "Fast CRC Computation for Generic Polynomials Using PCLMULQDQ" for the
 * reflected CRC-32 polynomial, as in Chromium's zlib (crc32_simd.c). len >= 64
 * and a multiple of 16; crc is the internal (inverted) state. */
__attribute__((target("pclmul,sse4.1")))
static uint32_t crc_fold(const unsigned char *buf, Py_ssize_t len, uint32_t crc) {
    static const uint64_t __attribute__((aligned(16))) k1k2[] = {0x0154442bd4, 0x01c6e41596};
    static const uint64_t __attribute__((aligned(16))) k3k4[] = {0x01751997d0, 0x00ccaa009e};
    static const uint64_t __attribute__((aligned(16))) k5k0[] = {0x0163cd6124, 0x0000000000};
    static const uint64_t __attribute__((aligned(16))) poly[] = {0x01db710641, 0x01f7011641};
    __m128i x0, x1, x2, x3, x4, x5, x6, x7, x8, y5, y6, y7, y8;
    x1 = _mm_loadu_si128((const __m128i *)(buf + 0x00));
    x2 = _mm_loadu_si128((const __m128i *)(buf + 0x10));
    x3 = _mm_loadu_si128((const __m128i *)(buf + 0x20));
    x4 = _mm_loadu_si128((const __m128i *)(buf + 0x30));
    x1 = _mm_xor_si128(x1, _mm_cvtsi32_si128((int)crc));
    x0 = _mm_load_si128((const __m128i *)k1k2);
    buf += 64;
    len -= 64;
    while (len >= 64) {  /* fold four 128-bit lanes in parallel */
        x5 = _mm_clmulepi64_si128(x1, x0, 0x00);
        x6 = _mm_clmulepi64_si128(x2, x0, 0x00);
        x7 = _mm_clmulepi64_si128(x3, x0, 0x00);
        x8 = _mm_clmulepi64_si128(x4, x0, 0x00);
        x1 = _mm_clmulepi64_si128(x1, x0, 0x11);
        x2 = _mm_clmulepi64_si128(x2, x0, 0x11);
        x3 = _mm_clmulepi64_si128(x3, x0, 0x11);
        x4 = _mm_clmulepi64_si128(x4, x0, 0x11);
        y5 = _mm_loadu_si128((const __m128i *)(buf + 0x00));
        y6 = _mm_loadu_si128((const __m128i *)(buf + 0x10));
        y7 = _mm_loadu_si128((const __m128i *)(buf + 0x20));
        y8 = _mm_loadu_si128((const __m128i *)(buf + 0x30));
        x1 = _mm_xor_si128(_mm_xor_si128(x1, x5), y5);
        x2 = _mm_xor_si128(_mm_xor_si128(x2, x6), y6);
        x3 = _mm_xor_si128(_mm_xor_si128(x3, x7), y7);
        x4 = _mm_xor_si128(_mm_xor_si128(x4, x8), y8);
        buf += 64;
        len -= 64;
    }
    x0 = _mm_load_si128((const __m128i *)k3k4);  /* fold the four lanes into one */
    x5 = _mm_clmulepi64_si128(x1, x0, 0x00);
    x1 = _mm_clmulepi64_si128(x1, x0, 0x11);
    x1 = _mm_xor_si128(_mm_xor_si128(x1, x2), x5);
    x5 = _mm_clmulepi64_si128(x1, x0, 0x00);
    x1 = _mm_clmulepi64_si128(x1, x0, 0x11);
    x1 = _mm_xor_si128(_mm_xor_si128(x1, x3), x5);
    x5 = _mm_clmulepi64_si128(x1, x0, 0x00);
    x1 = _mm_clmulepi64_si128(x1, x0, 0x11);
    x1 = _mm_xor_si128(_mm_xor_si128(x1, x4), x5);
    while (len >= 16) {  /* single folds of the remaining 16-byte blocks */
        x2 = _mm_loadu_si128((const __m128i *)buf);
        x5 = _mm_clmulepi64_si128(x1, x0, 0x00);
        x1 = _mm_clmulepi64_si128(x1, x0, 0x11);
        x1 = _mm_xor_si128(_mm_xor_si128(x1, x2), x5);
        buf += 16;
        len -= 16;
    }
    x2 = _mm_clmulepi64_si128(x1, x0, 0x10);  /* 128 -> 64 bits */
    x3 = _mm_setr_epi32(~0, 0, ~0, 0);
    x1 = _mm_srli_si128(x1, 8);
    x1 = _mm_xor_si128(x1, x2);
    x0 = _mm_loadl_epi64((const __m128i *)k5k0);
    x2 = _mm_srli_si128(x1, 4);
    x1 = _mm_and_si128(x1, x3);
    x1 = _mm_clmulepi64_si128(x1, x0, 0x00);
    x1 = _mm_xor_si128(x1, x2);
    x0 = _mm_load_si128((const __m128i *)poly);  /* Barrett reduction to 32 bits */
    x2 = _mm_and_si128(x1, x3);
    x2 = _mm_clmulepi64_si128(x2, x0, 0x10);
    x2 = _mm_and_si128(x2, x3);
    x2 = _mm_clmulepi64_si128(x2, x0, 0x00);
    x1 = _mm_xor_si128(x1, x2);
    return (uint32_t)_mm_extract_epi32(x1, 1);
}
#endif

static uint32_t crc32_of(const unsigned char *p, Py_ssize_t n) {
    uint32_t c = 0xFFFFFFFFu;
#ifdef HAVE_CLMUL_CRC
    if (have_clmul && n >= 64) {
        Py_ssize_t m = n & ~(Py_ssize_t)15;
        c = crc_fold(p, m, c);
        p += m;
        n -= m;
    }
#endif
    return crc_tables(c, p, n) ^ 0xFFFFFFFFu;
}

/* crc32(data) -> int: zlib.crc32's value, computed here (exposed for tests). */
static PyObject *py_crc32(PyObject *module, PyObject *arg) {
    Py_buffer view;
    uint32_t c;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0) return NULL;
    c = crc32_of((const unsigned char *)view.buf, view.len);
    PyBuffer_Release(&view);
    return PyLong_FromUnsignedLong(c);
}

/* ------------------------------------------------------------------------ scanning */

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

/* One entry's parsed layout (the entry is known complete and within bounds). */
typedef struct {
    int64_t offset;
    Py_ssize_t msg_end;
    int attributes;
    Py_ssize_t key_pos;
    int32_t key_len;        /* < 0: null */
    Py_ssize_t value_pos;
    int32_t value_len;      /* < 0: null */
} entry_t;

/* Parse the header fields of the valid entry at pos (after validation). */
static inline void parse_valid(const unsigned char *d, Py_ssize_t pos, entry_t *e) {
    int32_t size = be32(d + pos + 8);
    int magic = (int8_t)d[pos + 16];
    Py_ssize_t key_pos, vlen_pos;
    int32_t key_len;
    e->offset = be64(d + pos);
    e->msg_end = pos + LOG_OVERHEAD + size;
    e->attributes = d[pos + 17];
    if (magic == 0) {
        key_pos = pos + 22;
        key_len = be32(d + pos + 18);
    } else {
        key_pos = pos + 30;
        key_len = be32(d + pos + 26);
    }
    vlen_pos = key_len < 0 ? key_pos : key_pos + key_len;
    e->key_pos = key_pos;
    e->key_len = key_len;
    e->value_pos = vlen_pos + 4;
    e->value_len = be32(d + vlen_pos);
}

#define CORRUPT(...)                                                  \
    do {                                                              \
        s->status = ST_CORRUPT;                                       \
        s->stop = pos;                                                \
        s->bad_offset = offset;                                       \
        snprintf(s->reason, sizeof(s->reason), __VA_ARGS__);          \
        return;                                                       \
    } while (0)

/* Pass 1: validate entries from s->start; sets stop, status, entries, last_raw. No Python calls. */
static void scan_validate(scan_t *s) {
    const unsigned char *d = s->data;
    Py_ssize_t pos = s->start, end = s->end;
    int64_t offset = -1;
    s->entries = 0;
    s->last_raw = 0;
    s->bad_offset = -1;
    s->reason[0] = 0;
    while (pos + 22 <= end) {
        int32_t size, key_len, value_len;
        uint32_t stored, computed;
        int magic, attributes;
        Py_ssize_t msg_end, key_pos, vlen_pos, value_pos;
        offset = be64(d + pos);
        size = be32(d + pos + 8);
        if (size < MIN_MESSAGE_V0)
            CORRUPT("message size %d is below the minimum %d", (int)size, MIN_MESSAGE_V0);
        msg_end = pos + LOG_OVERHEAD + (Py_ssize_t)size;
        if (msg_end > end)
            break;
        stored = be32u(d + pos + 12);
        computed = crc32_of(d + pos + CRC_START, msg_end - (pos + CRC_START));
        if (computed != stored)
            CORRUPT("CRC mismatch (stored %u, computed %u)", (unsigned)stored, (unsigned)computed);
        magic = (int8_t)d[pos + 16];
        attributes = d[pos + 17];
        if (magic == 0) {
            key_pos = pos + 22;
            key_len = be32(d + pos + 18);
        } else {
            if (magic != 1)
                CORRUPT("unknown magic byte %d", magic);
            if (size < MIN_MESSAGE_V1)
                CORRUPT("message size %d is below the magic-1 minimum %d", (int)size, MIN_MESSAGE_V1);
            key_pos = pos + 30;
            key_len = be32(d + pos + 26);
        }
        vlen_pos = key_len < 0 ? key_pos : key_pos + key_len;
        value_pos = vlen_pos + 4;
        if (value_pos > msg_end)
            CORRUPT("key length %d overruns the message", (int)key_len);
        value_len = be32(d + vlen_pos);
        if (value_len >= 0 && value_pos + value_len > msg_end)
            CORRUPT("value length %d overruns the message", (int)value_len);
        if (attributes & 0x07) {
            if (!s->top_level)
                CORRUPT("nested compressed message");
            s->status = ST_WRAPPER;
            s->stop = pos;
            s->bad_offset = offset;
            return;
        }
        s->entries++;
        s->last_raw = offset;
        pos = msg_end;
    }
    s->stop = pos;
    if (pos < end) {
        offset = -1;
        if (end - pos >= LOG_OVERHEAD) {
            int32_t size = be32(d + pos + 8);
            offset = be64(d + pos);
            if (size < MIN_MESSAGE_V0)
                CORRUPT("message size %d is below the minimum %d", (int)size, MIN_MESSAGE_V0);
        }
        if (!s->top_level)
            CORRUPT("compressed message set ends inside a message");
        s->status = ST_TRUNCATED;
    } else {
        s->status = ST_END;
    }
}

/* Pass 2: count what the filter keeps in [start, stop). */
static void scan_count(scan_t *s, int64_t delta, int64_t fetch_offset) {
    const unsigned char *d = s->data;
    Py_ssize_t pos = s->start;
    entry_t e;
    s->kept = s->key_bytes = s->value_bytes = s->key_nulls = s->value_nulls = 0;
    while (pos < s->stop) {
        parse_valid(d, pos, &e);
        if (e.offset + delta >= fetch_offset) {
            s->kept++;
            if (e.key_len < 0) s->key_nulls++; else s->key_bytes += e.key_len;
            if (e.value_len < 0) s->value_nulls++; else s->value_bytes += e.value_len;
        }
        pos = e.msg_end;
    }
}

/* ------------------------------------------------------------------------ MessageBlock */

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

static PyTypeObject MessageBlockType;

/* Recycled block buffers. A block's large buffers (a chunk's values: most of
 * fetch.message.max.bytes) were fresh malloc'd memory for every chunk, and glibc gives
 * freed memory of that size back to the kernel (munmap, or trimming the heap), so the
 * decoder's copy into it page-faulted on every 4 KB: ~380,000 page faults in
 * `zkconsumer perf` over 4 GB of 10,000-byte messages (perf stat; 97% of them in that
 * memcpy, on the fetcher thread), ~40,000 with this. Arrow batches (KafkaStream.batches)
 * still hold the buffers when their block goes, so they are not recycled (and gain
 * nothing from this). A buffer of at least POOL_MIN bytes that only its block references
 * when the block goes (no view, no Arrow array, no hash taken) is kept here instead, at most
 * POOL_SLOTS of them of at most POOL_MAX bytes each, and reused for a buffer of exactly its
 * size (chunks of equal-sized messages have equal buffer sizes). Only under the GIL (block
 * allocation and deallocation both hold it), and only where the bytes object's cached hash
 * can be checked (Python < 3.12). */
#if PY_VERSION_HEX < 0x030C0000 && !defined(Py_GIL_DISABLED)
#define POOL_SLOTS 8
#define POOL_MIN (64 * 1024)
#define POOL_MAX (4 * 1024 * 1024)
static PyObject *pool[POOL_SLOTS];
static int pool_next;

static PyObject *new_bytes(Py_ssize_t n) {
    int i;
    if (n >= POOL_MIN && n <= POOL_MAX) {
        for (i = 0; i < POOL_SLOTS; i++) {
            if (pool[i] != NULL && PyBytes_GET_SIZE(pool[i]) == n) {
                PyObject *o = pool[i];
                pool[i] = NULL;
                return o;
            }
        }
    }
    return PyBytes_FromStringAndSize(NULL, n);
}

/* Release the block's reference to ``o`` (a bytes object or None), keeping it for reuse if allowed. */
static void release_bytes(PyObject *o) {
    Py_ssize_t n;
    PyObject *evicted;
    if (o == NULL) return;
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"  /* ob_shash: read only, while it exists (< 3.12) */
    if (!PyBytes_CheckExact(o) || Py_REFCNT(o) != 1 || ((PyBytesObject *)o)->ob_shash != -1) {
#pragma GCC diagnostic pop
        Py_DECREF(o);
        return;
    }
    n = PyBytes_GET_SIZE(o);
    if (n < POOL_MIN || n > POOL_MAX) {
        Py_DECREF(o);
        return;
    }
    evicted = pool[pool_next];
    pool[pool_next] = o;
    pool_next = (pool_next + 1) % POOL_SLOTS;
    Py_XDECREF(evicted);
}
#else
static PyObject *new_bytes(Py_ssize_t n) { return PyBytes_FromStringAndSize(NULL, n); }
static void release_bytes(PyObject *o) { Py_XDECREF(o); }
#endif

/* A block with room for n messages and the given data sizes; buffers uninitialised except validity. */
static MessageBlock *block_alloc(Py_ssize_t n, Py_ssize_t key_bytes, Py_ssize_t value_bytes,
                                 Py_ssize_t key_nulls, Py_ssize_t value_nulls) {
    MessageBlock *b = PyObject_New(MessageBlock, &MessageBlockType);
    Py_ssize_t bitmap = (n + 7) / 8;
    if (b == NULL)
        return NULL;
    b->n = n;
    b->key_nulls = key_nulls;
    b->value_nulls = value_nulls;
    b->offsets = new_bytes(n * 8);
    b->key_offsets = new_bytes((n + 1) * 4);
    b->key_data = new_bytes(key_bytes);
    b->value_offsets = new_bytes((n + 1) * 4);
    b->value_data = new_bytes(value_bytes);
    b->key_validity = key_nulls ? new_bytes(bitmap) : Py_NewRef(Py_None);
    b->value_validity = value_nulls ? new_bytes(bitmap) : Py_NewRef(Py_None);
    if (!b->offsets || !b->key_offsets || !b->key_data || !b->value_offsets || !b->value_data ||
        !b->key_validity || !b->value_validity) {
        Py_DECREF(b);
        return NULL;
    }
    b->off = (int64_t *)PyBytes_AS_STRING(b->offsets);
    b->koff = (int32_t *)PyBytes_AS_STRING(b->key_offsets);
    b->voff = (int32_t *)PyBytes_AS_STRING(b->value_offsets);
    b->kdata = PyBytes_AS_STRING(b->key_data);
    b->vdata = PyBytes_AS_STRING(b->value_data);
    b->kvalid = key_nulls ? (const uint8_t *)PyBytes_AS_STRING(b->key_validity) : NULL;
    b->vvalid = value_nulls ? (const uint8_t *)PyBytes_AS_STRING(b->value_validity) : NULL;
    if (key_nulls) memset(PyBytes_AS_STRING(b->key_validity), 0, bitmap);
    if (value_nulls) memset(PyBytes_AS_STRING(b->value_validity), 0, bitmap);
    b->koff[0] = 0;
    b->voff[0] = 0;
    return b;
}

static void block_dealloc(MessageBlock *b) {
    release_bytes(b->offsets);
    release_bytes(b->key_offsets);
    release_bytes(b->key_data);
    release_bytes(b->key_validity);
    release_bytes(b->value_offsets);
    release_bytes(b->value_data);
    release_bytes(b->value_validity);
    PyObject_Free(b);
}

static void scan_fill_at(const scan_t *s, int64_t delta, int64_t fetch_offset, MessageBlock *b,
                         Py_ssize_t *i_io, int32_t *kpos_io, int32_t *vpos_io);

/* Pass 3: fill the block from [start, stop). No Python calls. */
static void scan_fill(const scan_t *s, int64_t delta, int64_t fetch_offset, MessageBlock *b) {
    Py_ssize_t i = 0;
    int32_t kpos = 0, vpos = 0;
    scan_fill_at(s, delta, fetch_offset, b, &i, &kpos, &vpos);
}

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

static inline PyObject *block_key(const MessageBlock *b, Py_ssize_t i) {
    if (key_is_null(b, i)) Py_RETURN_NONE;
    return PyBytes_FromStringAndSize(b->kdata + b->koff[i], b->koff[i + 1] - b->koff[i]);
}

static inline PyObject *block_value(const MessageBlock *b, Py_ssize_t i) {
    if (value_is_null(b, i)) Py_RETURN_NONE;
    return PyBytes_FromStringAndSize(b->vdata + b->voff[i], b->voff[i + 1] - b->voff[i]);
}

static Py_ssize_t block_length(MessageBlock *b) { return b->n; }

static PyObject *block_item(MessageBlock *b, Py_ssize_t i) {
    PyObject *t, *offset, *key, *value;
    if (i < 0 || i >= b->n) {
        PyErr_SetString(PyExc_IndexError, "MessageBlock index out of range");
        return NULL;
    }
    offset = PyLong_FromLongLong(b->off[i]);
    key = block_key(b, i);
    value = block_value(b, i);
    t = (offset && key && value) ? PyTuple_New(3) : NULL;
    if (t == NULL) {
        Py_XDECREF(offset);
        Py_XDECREF(key);
        Py_XDECREF(value);
        return NULL;
    }
    PyTuple_SET_ITEM(t, 0, offset);
    PyTuple_SET_ITEM(t, 1, key);
    PyTuple_SET_ITEM(t, 2, value);
    return t;
}

static PyObject *block_subscript(MessageBlock *b, PyObject *index) {
    if (PyIndex_Check(index)) {
        Py_ssize_t i = PyNumber_AsSsize_t(index, PyExc_IndexError);
        if (i == -1 && PyErr_Occurred()) return NULL;
        if (i < 0) i += b->n;
        return block_item(b, i);
    }
    if (PySlice_Check(index)) {
        Py_ssize_t start, stop, step, len, k, i;
        PyObject *list;
        if (PySlice_Unpack(index, &start, &stop, &step) < 0) return NULL;
        len = PySlice_AdjustIndices(b->n, &start, &stop, step);
        list = PyList_New(len);
        if (list == NULL) return NULL;
        for (k = 0, i = start; k < len; k++, i += step) {
            PyObject *item = block_item(b, i);
            if (item == NULL) {
                Py_DECREF(list);
                return NULL;
            }
            PyList_SET_ITEM(list, k, item);
        }
        return list;
    }
    PyErr_Format(PyExc_TypeError, "MessageBlock indices must be integers or slices, not %.200s",
                 Py_TYPE(index)->tp_name);
    return NULL;
}

static PyObject *block_richcompare(PyObject *self, PyObject *other, int op) {
    PyObject *a, *b, *result;
    if ((op != Py_EQ && op != Py_NE) ||
        !(PyList_Check(other) || PyTuple_Check(other) || Py_TYPE(other) == &MessageBlockType))
        Py_RETURN_NOTIMPLEMENTED;
    a = PySequence_List(self);
    if (a == NULL) return NULL;
    b = PySequence_List(other);
    if (b == NULL) {
        Py_DECREF(a);
        return NULL;
    }
    result = PyObject_RichCompare(a, b, op);
    Py_DECREF(a);
    Py_DECREF(b);
    return result;
}

static PyObject *block_repr(MessageBlock *b) {
    if (b->n == 0) return PyUnicode_FromString("MessageBlock(0 messages)");
    return PyUnicode_FromFormat("MessageBlock(%zd messages, offsets %lld..%lld)", b->n,
                                (long long)b->off[0], (long long)b->off[b->n - 1]);
}

/* First index whose offset is >= the argument (offsets ascend); n if none. */
static PyObject *block_bisect(MessageBlock *b, PyObject *arg) {
    long long target = PyLong_AsLongLong(arg);
    Py_ssize_t lo = 0, hi = b->n;
    if (target == -1 && PyErr_Occurred()) return NULL;
    while (lo < hi) {
        Py_ssize_t mid = lo + (hi - lo) / 2;
        if (b->off[mid] < target) lo = mid + 1; else hi = mid;
    }
    return PyLong_FromSsize_t(lo);
}

static PyObject *block_offset_at(MessageBlock *b, PyObject *arg) {
    Py_ssize_t i = PyNumber_AsSsize_t(arg, PyExc_IndexError);
    if (i == -1 && PyErr_Occurred()) return NULL;
    if (i < 0) i += b->n;
    if (i < 0 || i >= b->n) {
        PyErr_SetString(PyExc_IndexError, "MessageBlock index out of range");
        return NULL;
    }
    return PyLong_FromLongLong(b->off[i]);
}

static int clamp_range(MessageBlock *b, PyObject *args, Py_ssize_t *start, Py_ssize_t *stop) {
    *start = 0;
    *stop = b->n;
    if (!PyArg_ParseTuple(args, "|nn", start, stop)) return -1;
    if (*start < 0) *start = 0;
    if (*stop > b->n) *stop = b->n;
    if (*stop < *start) *stop = *start;
    return 0;
}

/* payload_bytes([start, stop]): key + value bytes of messages [start, stop). */
static PyObject *block_payload_bytes(MessageBlock *b, PyObject *args) {
    Py_ssize_t start, stop;
    if (clamp_range(b, args, &start, &stop) < 0) return NULL;
    return PyLong_FromLongLong((long long)(b->koff[stop] - b->koff[start]) + (b->voff[stop] - b->voff[start]));
}

/* value_bytes([start, stop]): value bytes of messages [start, stop). */
static PyObject *block_value_bytes(MessageBlock *b, PyObject *args) {
    Py_ssize_t start, stop;
    if (clamp_range(b, args, &start, &stop) < 0) return NULL;
    return PyLong_FromLongLong((long long)(b->voff[stop] - b->voff[start]));
}

static PyObject *block_first_offset(MessageBlock *b, void *closure) {
    if (b->n == 0) Py_RETURN_NONE;
    return PyLong_FromLongLong(b->off[0]);
}

static PyObject *block_last_offset(MessageBlock *b, void *closure) {
    if (b->n == 0) Py_RETURN_NONE;
    return PyLong_FromLongLong(b->off[b->n - 1]);
}

/* BlockBuffer: one of a block's buffers, exported (read-only) with the *block* as its owner.
 * Arrow arrays built on these keep the block alive, not its bytes objects, so when the last
 * array goes the block goes with its buffers referenced by it alone: recycled (release_bytes). */
typedef struct {
    PyObject_HEAD
    MessageBlock *block;
    PyObject *bytes;          /* borrowed from block, which outlives this */
} BlockBuffer;

static int blockbuffer_getbuffer(BlockBuffer *v, Py_buffer *view, int flags) {
    return PyBuffer_FillInfo(view, (PyObject *)v, PyBytes_AS_STRING(v->bytes), PyBytes_GET_SIZE(v->bytes), 1, flags);
}

static void blockbuffer_dealloc(BlockBuffer *v) {
    Py_XDECREF(v->block);
    PyObject_Free(v);
}

static PyBufferProcs blockbuffer_as_buffer = {
    .bf_getbuffer = (getbufferproc)blockbuffer_getbuffer,
};

static PyTypeObject BlockBufferType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "zkconsumer.wire._speedups.BlockBuffer",
    .tp_doc = "One buffer of a MessageBlock (read-only), keeping the block alive.",
    .tp_basicsize = sizeof(BlockBuffer),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_dealloc = (destructor)blockbuffer_dealloc,
    .tp_as_buffer = &blockbuffer_as_buffer,
};

static PyObject *block_buffer_of(MessageBlock *b, PyObject *bytes) {
    BlockBuffer *v;
    if (bytes == Py_None) Py_RETURN_NONE;
    v = PyObject_New(BlockBuffer, &BlockBufferType);
    if (v == NULL) return NULL;
    v->block = (MessageBlock *)Py_NewRef((PyObject *)b);
    v->bytes = bytes;
    return (PyObject *)v;
}

/* buffers() -> (offsets, key_validity, key_offsets, key_data, value_validity, value_offsets, value_data) */
static PyObject *block_buffers(MessageBlock *b, PyObject *unused) {
    PyObject *items[7] = {b->offsets, b->key_validity, b->key_offsets, b->key_data,
                          b->value_validity, b->value_offsets, b->value_data};
    PyObject *t = PyTuple_New(7);
    int i;
    if (t == NULL) return NULL;
    for (i = 0; i < 7; i++) {
        PyObject *v = block_buffer_of(b, items[i]);
        if (v == NULL) {
            Py_DECREF(t);
            return NULL;
        }
        PyTuple_SET_ITEM(t, i, v);
    }
    return t;
}

static PyMethodDef block_methods[] = {
    {"buffers", (PyCFunction)block_buffers, METH_NOARGS,
     "buffers() -> (offsets, key_validity, key_offsets, key_data, value_validity, value_offsets, value_data): "
     "read-only buffer objects (None for an absent bitmap) that keep the block, not its bytes, alive"},
    {"bisect", (PyCFunction)block_bisect, METH_O,
     "bisect(offset) -> first index whose offset is >= offset (len(self) if none)"},
    {"offset_at", (PyCFunction)block_offset_at, METH_O, "offset_at(i) -> the offset of message i"},
    {"payload_bytes", (PyCFunction)block_payload_bytes, METH_VARARGS,
     "payload_bytes([start, stop]) -> key + value bytes of messages [start, stop)"},
    {"value_bytes", (PyCFunction)block_value_bytes, METH_VARARGS,
     "value_bytes([start, stop]) -> value bytes of messages [start, stop)"},
    {NULL}
};

static PyMemberDef block_members[] = {
    {"offsets", T_OBJECT, offsetof(MessageBlock, offsets), READONLY, "int64 offsets (native byte order)"},
    {"key_offsets", T_OBJECT, offsetof(MessageBlock, key_offsets), READONLY, "int32 key offsets, n + 1"},
    {"key_data", T_OBJECT, offsetof(MessageBlock, key_data), READONLY, "the keys, back to back"},
    {"key_validity", T_OBJECT, offsetof(MessageBlock, key_validity), READONLY,
     "validity bitmap of keys (LSB first, 1 = not null), None when no key is null"},
    {"key_null_count", T_PYSSIZET, offsetof(MessageBlock, key_nulls), READONLY, "null keys"},
    {"value_offsets", T_OBJECT, offsetof(MessageBlock, value_offsets), READONLY, "int32 value offsets, n + 1"},
    {"value_data", T_OBJECT, offsetof(MessageBlock, value_data), READONLY, "the values, back to back"},
    {"value_validity", T_OBJECT, offsetof(MessageBlock, value_validity), READONLY,
     "validity bitmap of values, None when no value is null"},
    {"value_null_count", T_PYSSIZET, offsetof(MessageBlock, value_nulls), READONLY, "null values"},
    {NULL}
};

static PyGetSetDef block_getset[] = {
    {"first_offset", (getter)block_first_offset, NULL, "offset of the first message, None if empty", NULL},
    {"last_offset", (getter)block_last_offset, NULL, "offset of the last message, None if empty", NULL},
    {NULL}
};

static PySequenceMethods block_as_sequence = {
    .sq_length = (lenfunc)block_length,
    .sq_item = (ssizeargfunc)block_item,
};

static PyMappingMethods block_as_mapping = {
    .mp_length = (lenfunc)block_length,
    .mp_subscript = (binaryfunc)block_subscript,
};

static PyObject *block_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    PyErr_SetString(PyExc_TypeError, "MessageBlock objects are made by decode() and concat()");
    return NULL;
}

static PyTypeObject MessageBlockType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "zkconsumer.wire._speedups.MessageBlock",
    .tp_doc = "The messages of one fetched chunk in Arrow layout; a read-only sequence of "
              "(offset, key, value) tuples.",
    .tp_basicsize = sizeof(MessageBlock),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = block_new,
    .tp_dealloc = (destructor)block_dealloc,
    .tp_repr = (reprfunc)block_repr,
    .tp_hash = PyObject_HashNotImplemented,
    .tp_richcompare = block_richcompare,
    .tp_as_sequence = &block_as_sequence,
    .tp_as_mapping = &block_as_mapping,
    .tp_methods = block_methods,
    .tp_members = block_members,
    .tp_getset = block_getset,
};

/* ------------------------------------------------------------------------ decode() / concat() */

/* Release the GIL for the CRC pass only when there is enough work to be worth a GIL round trip. */
#ifndef NOGIL_THRESHOLD
#define NOGIL_THRESHOLD (64 * 1024)
#endif

static PyObject *py_decode(PyObject *module, PyObject *args) {
    Py_buffer view;
    Py_ssize_t start;
    long long fetch_offset;
    int top_level;
    PyObject *wrapper_offset = Py_None, *next_offset = NULL, *reason = NULL, *result = NULL;
    MessageBlock *block = NULL;
    scan_t s;
    int64_t delta = 0;

    if (!PyArg_ParseTuple(args, "y*nLp|O", &view, &start, &fetch_offset, &top_level, &wrapper_offset))
        return NULL;
    if (start < 0 || start > view.len) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "start outside the buffer");
        return NULL;
    }
    memset(&s, 0, sizeof(s));
    s.data = (const unsigned char *)view.buf;
    s.start = start;
    s.end = view.len;
    s.top_level = top_level;
    if (view.len - start >= NOGIL_THRESHOLD) {
        Py_BEGIN_ALLOW_THREADS
        scan_validate(&s);
        Py_END_ALLOW_THREADS
    } else {
        scan_validate(&s);
    }
    if (wrapper_offset != Py_None && s.entries > 0) {
        long long w = PyLong_AsLongLong(wrapper_offset);
        if (w == -1 && PyErr_Occurred()) goto done;
        delta = (int64_t)w - s.last_raw;
    }
    scan_count(&s, delta, fetch_offset);
    block = block_alloc(s.kept, s.key_bytes, s.value_bytes, s.key_nulls, s.value_nulls);
    if (block == NULL) goto done;
    /* The block is not shared yet: large fills (a decompressed wrapper's inner set can
     * be tens of MB) copy without the GIL, if the buffer is read-only (the fill re-reads
     * the sizes the count pass read; nobody may change them in between). */
    if (view.readonly && s.stop - s.start >= NOGIL_THRESHOLD) {
        Py_BEGIN_ALLOW_THREADS
        scan_fill(&s, delta, fetch_offset, block);
        Py_END_ALLOW_THREADS
    } else {
        scan_fill(&s, delta, fetch_offset, block);
    }
    if (s.entries > 0) {
        next_offset = PyLong_FromLongLong(s.last_raw + delta + 1);
    } else {
        next_offset = Py_NewRef(Py_None);
    }
    reason = s.status == ST_CORRUPT ? PyUnicode_FromString(s.reason) : Py_NewRef(Py_None);
    if (next_offset && reason)
        result = Py_BuildValue("(OnOiLO)", (PyObject *)block, s.stop, next_offset, s.status,
                               (long long)s.bad_offset, reason);
done:
    Py_XDECREF(block);
    Py_XDECREF(next_offset);
    Py_XDECREF(reason);
    PyBuffer_Release(&view);
    return result;
}

static void set_bit(uint8_t *bitmap, Py_ssize_t i) { bitmap[i >> 3] |= (uint8_t)(1u << (i & 7)); }

static PyObject *py_concat(PyObject *module, PyObject *arg) {
    PyObject *seq = PySequence_Fast(arg, "concat() takes a sequence of MessageBlocks");
    Py_ssize_t count, k, n = 0, kb = 0, vb = 0, kn = 0, vn = 0, i = 0;
    MessageBlock *out;
    if (seq == NULL) return NULL;
    count = PySequence_Fast_GET_SIZE(seq);
    for (k = 0; k < count; k++) {
        MessageBlock *b = (MessageBlock *)PySequence_Fast_GET_ITEM(seq, k);
        if (Py_TYPE(b) != &MessageBlockType) {
            Py_DECREF(seq);
            PyErr_SetString(PyExc_TypeError, "concat() takes a sequence of MessageBlocks");
            return NULL;
        }
        n += b->n;
        kb += b->koff[b->n];
        vb += b->voff[b->n];
        kn += b->key_nulls;
        vn += b->value_nulls;
    }
    if (kb > INT32_MAX || vb > INT32_MAX) {
        Py_DECREF(seq);
        PyErr_SetString(PyExc_OverflowError, "concatenated keys or values exceed 2 GiB");
        return NULL;
    }
    out = block_alloc(n, kb, vb, kn, vn);
    if (out == NULL) {
        Py_DECREF(seq);
        return NULL;
    }
    /* The blocks are immutable and held by seq, out is not shared yet: a large copy
     * (the inner sets of a fetch of compressed wrappers) runs without the GIL. */
    {
        PyObject **items = PySequence_Fast_ITEMS(seq);
        int nogil = kb + vb + n * 16 >= NOGIL_THRESHOLD;
        PyThreadState *ts = nogil ? PyEval_SaveThread() : NULL;
        for (k = 0; k < count; k++) {
            MessageBlock *b = (MessageBlock *)items[k];
            int32_t kbase = out->koff[i], vbase = out->voff[i];
            Py_ssize_t j;
            memcpy(out->off + i, b->off, b->n * 8);
            memcpy((char *)out->kdata + kbase, b->kdata, b->koff[b->n]);
            memcpy((char *)out->vdata + vbase, b->vdata, b->voff[b->n]);
            for (j = 0; j < b->n; j++) {
                out->koff[i + j + 1] = kbase + b->koff[j + 1];
                out->voff[i + j + 1] = vbase + b->voff[j + 1];
                if (kn && !key_is_null(b, j)) set_bit((uint8_t *)out->kvalid, i + j);
                if (vn && !value_is_null(b, j)) set_bit((uint8_t *)out->vvalid, i + j);
            }
            i += b->n;
        }
        if (nogil) PyEval_RestoreThread(ts);
    }
    Py_DECREF(seq);
    return (PyObject *)out;
}

/* ------------------------------------------------------------------------ decode_inner() */

/* scan_fill for one of several sets filling one block: continues at message *i and data
 * positions *kpos / *vpos, and advances them. No Python calls. */
static void scan_fill_at(const scan_t *s, int64_t delta, int64_t fetch_offset, MessageBlock *b,
                         Py_ssize_t *i_io, int32_t *kpos_io, int32_t *vpos_io) {
    const unsigned char *d = s->data;
    Py_ssize_t pos = s->start, i = *i_io;
    int32_t kpos = *kpos_io, vpos = *vpos_io;
    char *kdata = (char *)b->kdata, *vdata = (char *)b->vdata;
    uint8_t *kvalid = (uint8_t *)b->kvalid, *vvalid = (uint8_t *)b->vvalid;
    entry_t e;
    while (pos < s->stop) {
        parse_valid(d, pos, &e);
        if (e.offset + delta >= fetch_offset) {
            b->off[i] = e.offset + delta;
            if (e.key_len >= 0) {
                memcpy(kdata + kpos, d + e.key_pos, e.key_len);
                kpos += e.key_len;
                if (kvalid) kvalid[i >> 3] |= (uint8_t)(1u << (i & 7));
            }
            if (e.value_len >= 0) {
                memcpy(vdata + vpos, d + e.value_pos, e.value_len);
                vpos += e.value_len;
                if (vvalid) vvalid[i >> 3] |= (uint8_t)(1u << (i & 7));
            }
            i++;
            b->koff[i] = kpos;
            b->voff[i] = vpos;
        }
        pos = e.msg_end;
    }
    *i_io = i;
    *kpos_io = kpos;
    *vpos_io = vpos;
}

/* decode_inner(sets, fetch_offset) -> (block, bad_index, reason)
 *     ``sets``: a sequence of ``(buffer, wrapper_offset or None)``, the decompressed inner
 *     message sets of consecutive compressed wrappers (read-only buffers). Validates each
 *     as decode(..., top_level=False) does and returns the messages >= fetch_offset of all
 *     of them in ONE MessageBlock: (block, -1, None), with no per-wrapper block and no
 *     concat copy. If set k is corrupt it returns (None, k, reason) and decodes nothing.
 *     The validating, counting and copying passes run without the GIL for large input. */
static PyObject *py_decode_inner(PyObject *module, PyObject *args) {
    PyObject *arg, *seq, *result = NULL;
    long long fetch_offset;
    Py_ssize_t count, k, got = 0, bad = -1, total = 0, n = 0, kb = 0, vb = 0, kn = 0, vn = 0;
    Py_buffer *views = NULL;
    scan_t *scans = NULL;
    int64_t *deltas = NULL;
    char *has_wrapper_offset = NULL;
    MessageBlock *block = NULL;
    PyThreadState *ts;

    if (!PyArg_ParseTuple(args, "OL", &arg, &fetch_offset))
        return NULL;
    seq = PySequence_Fast(arg, "decode_inner() takes a sequence of (buffer, wrapper_offset) pairs");
    if (seq == NULL)
        return NULL;
    count = PySequence_Fast_GET_SIZE(seq);
    views = PyMem_Calloc(count + 1, sizeof(Py_buffer));
    scans = PyMem_Calloc(count + 1, sizeof(scan_t));
    deltas = PyMem_Calloc(count + 1, sizeof(int64_t));
    has_wrapper_offset = PyMem_Calloc(count + 1, 1);
    if (!views || !scans || !deltas || !has_wrapper_offset) {
        PyErr_NoMemory();
        goto done;
    }
    for (k = 0; k < count; k++) {
        PyObject *item = PySequence_Fast_GET_ITEM(seq, k);
        PyObject *wrapper_offset;
        if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) != 2) {
            PyErr_SetString(PyExc_TypeError, "decode_inner() takes a sequence of (buffer, wrapper_offset) pairs");
            goto done;
        }
        if (PyObject_GetBuffer(PyTuple_GET_ITEM(item, 0), &views[k], PyBUF_SIMPLE) < 0)
            goto done;
        got = k + 1;
        if (!views[k].readonly) {
            PyErr_SetString(PyExc_ValueError, "decode_inner() needs read-only buffers");
            goto done;
        }
        wrapper_offset = PyTuple_GET_ITEM(item, 1);
        if (wrapper_offset != Py_None) {
            long long w = PyLong_AsLongLong(wrapper_offset);
            if (w == -1 && PyErr_Occurred())
                goto done;
            deltas[k] = (int64_t)w;
            has_wrapper_offset[k] = 1;
        }
        scans[k].data = (const unsigned char *)views[k].buf;
        scans[k].start = 0;
        scans[k].end = views[k].len;
        scans[k].top_level = 0;
        total += views[k].len;
    }
    ts = total >= NOGIL_THRESHOLD ? PyEval_SaveThread() : NULL;
    for (k = 0; k < count; k++) {
        scan_t *s = &scans[k];
        scan_validate(s);
        if (s->status == ST_CORRUPT) {
            bad = k;
            break;
        }
        deltas[k] = has_wrapper_offset[k] && s->entries > 0 ? deltas[k] - s->last_raw : 0;
        scan_count(s, deltas[k], fetch_offset);
        n += s->kept;
        kb += s->key_bytes;
        vb += s->value_bytes;
        kn += s->key_nulls;
        vn += s->value_nulls;
    }
    if (ts != NULL)
        PyEval_RestoreThread(ts);
    if (bad >= 0) {
        result = Py_BuildValue("(OnN)", Py_None, bad, PyUnicode_FromString(scans[bad].reason));
        goto done;
    }
    if (kb > INT32_MAX || vb > INT32_MAX) {
        PyErr_SetString(PyExc_OverflowError, "keys or values of one fetch exceed 2 GiB");
        goto done;
    }
    block = block_alloc(n, kb, vb, kn, vn);
    if (block == NULL)
        goto done;
    {
        Py_ssize_t i = 0;
        int32_t kpos = 0, vpos = 0;
        ts = total >= NOGIL_THRESHOLD ? PyEval_SaveThread() : NULL;
        for (k = 0; k < count; k++)
            scan_fill_at(&scans[k], deltas[k], fetch_offset, block, &i, &kpos, &vpos);
        if (ts != NULL)
            PyEval_RestoreThread(ts);
    }
    result = Py_BuildValue("(OnO)", (PyObject *)block, (Py_ssize_t)-1, Py_None);
done:
    for (k = 0; k < got; k++)
        PyBuffer_Release(&views[k]);
    PyMem_Free(views);
    PyMem_Free(scans);
    PyMem_Free(deltas);
    PyMem_Free(has_wrapper_offset);
    Py_XDECREF(block);
    Py_DECREF(seq);
    return result;
}

/* ------------------------------------------------------------------------ Cursor */

static PyObject *str_refill, *str_consumed_offset, *str_topic, *str_partition;

/* Recycled messages. Without decoders a message is a tuple of a str, ints, bytes and None,
 * and deallocating one (subtype_dealloc, GC untracking) and allocating the next cost about
 * a fifth of the per-message path at 100-byte values (perf record of `zkconsumer perf`).
 * So the cursor keeps the last RING messages it handed out and, as zip() and enumerate()
 * do with their result tuples, fills one again in place when the ring holds its only
 * reference: nobody else can see it then (a tuple has no weak references, and it is
 * untracked by the GC from that check to the refill, so a finalizer run by a collection
 * meanwhile cannot find it). Its key and value, if bytes of the new message's sizes that
 * only it references, are refilled too instead of being freed and allocated again (with
 * the cached hash reset). RING is 2 because a ``for m in stream``
 * loop still holds the previous message while asking for the next one. The values of the
 * last RING messages thus stay referenced until the next messages reuse them or the
 * iterator goes. With decoders, whose results may have finalisers or be large, every
 * message is a new tuple. */
#define RING 2

typedef struct {
    PyObject_HEAD
    PyObject *info;           /* the chunk's PartitionTopicInfo, or NULL */
    PyObject *messages;       /* the chunk's messages, or NULL */
    MessageBlock *block;      /* messages, when it is a MessageBlock (borrowed from messages) */
    PyObject *seq;            /* a tuple snapshot of messages otherwise */
    Py_ssize_t pos, n;
    PyObject *topic, *partition;
    PyObject *mm_type;        /* MessageAndMetadata: a tuple subclass of 5 fields */
    PyObject *key_decoder, *value_decoder;
    PyObject *next_obj;       /* cached int object of next_val */
    int64_t next_val;
    Py_ssize_t consumed_slot; /* byte offset of info's consumed_offset __slots__ member, 0 = use getattr */
    unsigned long long generation;
    long long delivered_messages, delivered_bytes;
    PyObject *ring[RING];     /* the last messages handed out (no decoders): reused once only the ring holds them */
    int ring_old;             /* the slot a new message replaces when neither can be reused */
} Cursor;

static void cursor_drop(Cursor *c) {
    PyObject *info = c->info, *messages = c->messages, *seq = c->seq, *topic = c->topic, *part = c->partition;
    c->info = c->messages = c->seq = c->topic = c->partition = NULL;
    c->block = NULL;
    c->consumed_slot = 0;
    c->pos = c->n = 0;
    c->generation++;
    Py_XDECREF(info);
    Py_XDECREF(messages);
    Py_XDECREF(seq);
    Py_XDECREF(topic);
    Py_XDECREF(part);
}

static int cursor_traverse(Cursor *c, visitproc visit, void *arg) {
    Py_VISIT(c->info);
    Py_VISIT(c->messages);
    Py_VISIT(c->seq);
    Py_VISIT(c->topic);
    Py_VISIT(c->partition);
    Py_VISIT(c->mm_type);
    Py_VISIT(c->key_decoder);
    Py_VISIT(c->value_decoder);
    Py_VISIT(c->next_obj);
    Py_VISIT(c->ring[0]);
    Py_VISIT(c->ring[1]);
    return 0;
}

static int cursor_clear_refs(Cursor *c) {
    cursor_drop(c);
    Py_CLEAR(c->mm_type);
    Py_CLEAR(c->key_decoder);
    Py_CLEAR(c->value_decoder);
    Py_CLEAR(c->next_obj);
    Py_CLEAR(c->ring[0]);
    Py_CLEAR(c->ring[1]);
    return 0;
}

static void cursor_dealloc(Cursor *c) {
    PyObject_GC_UnTrack(c);
    cursor_clear_refs(c);
    Py_TYPE(c)->tp_free((PyObject *)c);
}

static int cursor_init(Cursor *c, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"message_type", "key_decoder", "value_decoder", NULL};
    PyObject *mm_type, *kd = Py_None, *vd = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O|OO", kwlist, &mm_type, &kd, &vd)) return -1;
    if (!PyType_Check(mm_type) || !PyType_IsSubtype((PyTypeObject *)mm_type, &PyTuple_Type) ||
        ((PyTypeObject *)mm_type)->tp_dictoffset != 0) {
        PyErr_SetString(PyExc_TypeError, "message_type must be a tuple subclass without __dict__ (a NamedTuple)");
        return -1;
    }
    Py_CLEAR(c->ring[0]);  /* made with the previous type or decoders */
    Py_CLEAR(c->ring[1]);
    Py_XSETREF(c->mm_type, Py_NewRef(mm_type));
    Py_XSETREF(c->key_decoder, kd == Py_None ? NULL : Py_NewRef(kd));
    Py_XSETREF(c->value_decoder, vd == Py_None ? NULL : Py_NewRef(vd));
    return 0;
}

/* Where ``consumed_offset`` lives in ``info``: the byte offset of its __slots__ member when the
 * type resolves attributes generically (then reading/writing the slot is exactly what getattr and
 * setattr do), else 0 (use getattr/setattr). */
static Py_ssize_t consumed_slot_of(PyObject *info) {
    PyTypeObject *type = Py_TYPE(info);
    PyObject *descr;
    PyMemberDef *member;
    if (type->tp_getattro != PyObject_GenericGetAttr || type->tp_setattro != PyObject_GenericSetAttr)
        return 0;
    descr = _PyType_Lookup(type, str_consumed_offset);  /* borrowed */
    if (descr == NULL || !Py_IS_TYPE(descr, &PyMemberDescr_Type))
        return 0;
    member = ((PyMemberDescrObject *)descr)->d_member;
    if (member->type != T_OBJECT_EX || (member->flags & READONLY) || member->offset <= 0)
        return 0;
    return member->offset;
}

/* _install(info, messages, pos=0): make ``messages`` (of ``info``'s partition) the current chunk. */
static PyObject *cursor_install(Cursor *c, PyObject *args) {
    PyObject *info, *messages, *topic, *partition, *seq = NULL;
    Py_ssize_t pos = 0, n;
    if (!PyArg_ParseTuple(args, "OO|n", &info, &messages, &pos)) return NULL;
    topic = PyObject_GetAttr(info, str_topic);
    if (topic == NULL) return NULL;
    partition = PyObject_GetAttr(info, str_partition);
    if (partition == NULL) {
        Py_DECREF(topic);
        return NULL;
    }
    if (Py_TYPE(messages) == &MessageBlockType) {
        n = ((MessageBlock *)messages)->n;
    } else {
        seq = PySequence_Tuple(messages);  /* a snapshot: a list mutated later cannot shrink under us */
        if (seq == NULL) {
            Py_DECREF(topic);
            Py_DECREF(partition);
            return NULL;
        }
        n = PySequence_Fast_GET_SIZE(seq);
    }
    cursor_drop(c);
    c->info = Py_NewRef(info);
    c->messages = Py_NewRef(messages);
    c->block = seq == NULL ? (MessageBlock *)messages : NULL;
    c->seq = seq;
    c->topic = topic;
    c->partition = partition;
    c->n = n;
    c->pos = pos < 0 ? 0 : (pos > n ? n : pos);
    c->consumed_slot = consumed_slot_of(info);
    Py_RETURN_NONE;
}

static PyObject *cursor_clear_method(Cursor *c, PyObject *unused) {
    cursor_drop(c);
    Py_RETURN_NONE;
}

/* _take_rest() -> (info, messages, pos) of the current chunk (then dropped), or None. */
static PyObject *cursor_take_rest(Cursor *c, PyObject *unused) {
    PyObject *result;
    if (c->messages == NULL || c->pos >= c->n) {
        cursor_drop(c);
        Py_RETURN_NONE;
    }
    result = Py_BuildValue("(OOn)", c->info, c->messages, c->pos);
    if (result != NULL) cursor_drop(c);
    return result;
}

static PyObject *cursor_has_chunk(Cursor *c, void *closure) {
    return PyBool_FromLong(c->messages != NULL && c->pos < c->n);
}

static inline int read_consumed(Cursor *c, long long *out) {
    PyObject *v;
    if (c->consumed_slot) {
        v = *(PyObject **)((char *)c->info + c->consumed_slot);
        if (v != NULL && PyLong_CheckExact(v)) {
            *out = PyLong_AsLongLong(v);
            return (*out == -1 && PyErr_Occurred()) ? -1 : 0;
        }
    }
    v = PyObject_GetAttr(c->info, str_consumed_offset);
    if (v == NULL) return -1;
    *out = PyLong_AsLongLong(v);
    Py_DECREF(v);
    if (*out == -1 && PyErr_Occurred()) return -1;
    return 0;
}

/* info.consumed_offset = value (a new reference, consumed); never runs Python code on the slot path. */
static inline int write_consumed(Cursor *c, PyObject *value) {
    if (c->consumed_slot) {
        PyObject **slot = (PyObject **)((char *)c->info + c->consumed_slot);
        PyObject *old = *slot;
        *slot = value;
        Py_XDECREF(old);  /* an int: its deallocation runs no Python code */
        return 0;
    }
    if (PyObject_SetAttr(c->info, str_consumed_offset, value) < 0) {
        Py_DECREF(value);
        return -1;
    }
    Py_DECREF(value);
    return 0;
}

static Py_ssize_t payload_size(PyObject *o) {
    Py_ssize_t n;
    if (o == Py_None) return 0;
    if (PyBytes_CheckExact(o)) return PyBytes_GET_SIZE(o);
    n = PyObject_Size(o);
    if (n < 0) {
        PyErr_Clear();
        return 0;
    }
    return n;
}

/* The bytes src[0..n) as a bytes object: ``old`` itself, refilled, if it is a bytes object of
 * that size that only an unreachable recycled message references (see RING), else a new one. */
static inline PyObject *refill_bytes(PyObject *old, const char *src, Py_ssize_t n) {
    if (old != NULL && PyBytes_CheckExact(old) && Py_REFCNT(old) == 1 && PyBytes_GET_SIZE(old) == n) {
        memcpy(PyBytes_AS_STRING(old), src, (size_t)n);
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"  /* the cached hash of the old contents */
        ((PyBytesObject *)old)->ob_shash = -1;
#pragma GCC diagnostic pop
        return Py_NewRef(old);
    }
    return PyBytes_FromStringAndSize(src, n);
}

/* One step at the current position: the message handed out, or NULL without an
 * exception when the position held nothing to hand out (skipped, or the chunk
 * was cleared/replaced meanwhile), or NULL with an exception. */
static PyObject *cursor_step(Cursor *c) {
    unsigned long long gen = c->generation;
    Py_ssize_t i = c->pos;
    PyObject *messages = Py_NewRef(c->messages);  /* keep the chunk alive if cleared meanwhile */
    PyObject *offset_obj = NULL, *next_obj = NULL, *key = NULL, *value = NULL, *mm = NULL;
    PyTypeObject *mm_type = (PyTypeObject *)c->mm_type;
    int slot = -1, recycle = c->key_decoder == NULL && c->value_decoder == NULL;
    long long consumed;
    int64_t offset;
    Py_ssize_t size;

    if (c->block != NULL) {
        MessageBlock *b = c->block;
        offset = b->off[i];
        if (read_consumed(c, &consumed) < 0) goto error;
        if (offset < consumed) goto skip;
        if (recycle) {
            /* The ring's message is unreachable once untracked: only the ring references it,
             * and a finalizer run by a collection below cannot find it through the GC either. */
            if (c->ring[0] != NULL && Py_REFCNT(c->ring[0]) == 1) slot = 0;
            else if (c->ring[1] != NULL && Py_REFCNT(c->ring[1]) == 1) slot = 1;
            if (slot >= 0) {
                mm = Py_NewRef(c->ring[slot]);
                if (PyObject_GC_IsTracked(mm)) PyObject_GC_UnTrack(mm);
            }
        }
        if (key_is_null(b, i)) key = Py_NewRef(Py_None);
        else key = refill_bytes(mm ? PyTuple_GET_ITEM(mm, 3) : NULL, b->kdata + b->koff[i], b->koff[i + 1] - b->koff[i]);
        if (key == NULL) goto error;
        if (value_is_null(b, i)) value = Py_NewRef(Py_None);
        else value = refill_bytes(mm ? PyTuple_GET_ITEM(mm, 4) : NULL, b->vdata + b->voff[i], b->voff[i + 1] - b->voff[i]);
        if (value == NULL) goto error;
        size = (b->koff[i + 1] - b->koff[i]) + (b->voff[i + 1] - b->voff[i]);
    } else {
        PyObject *item = PySequence_Fast_GET_ITEM(c->seq, i), *t;
        long long o;
        Py_INCREF(item);
        t = PyTuple_CheckExact(item) ? Py_NewRef(item) : PySequence_Tuple(item);
        Py_DECREF(item);
        if (t == NULL) goto error;
        if (PyTuple_GET_SIZE(t) != 3) {
            Py_DECREF(t);
            PyErr_SetString(PyExc_ValueError, "a chunk's messages must be (offset, key, value) tuples");
            goto error;
        }
        o = PyLong_AsLongLong(PyTuple_GET_ITEM(t, 0));
        if (o == -1 && PyErr_Occurred()) {
            Py_DECREF(t);
            goto error;
        }
        offset = o;
        key = Py_NewRef(PyTuple_GET_ITEM(t, 1));
        value = Py_NewRef(PyTuple_GET_ITEM(t, 2));
        Py_DECREF(t);
        if (read_consumed(c, &consumed) < 0) goto error;
        if (offset < consumed) goto skip;
        size = payload_size(key) + payload_size(value);
    }
    /* Everything that can allocate (and so, through a collection, run other threads) happens here, */
    if (c->next_obj != NULL && c->next_val == offset) {
        offset_obj = Py_NewRef(c->next_obj);
    } else {
        offset_obj = PyLong_FromLongLong(offset);
        if (offset_obj == NULL) goto error;
    }
    next_obj = PyLong_FromLongLong(offset + 1);
    if (next_obj == NULL) goto error;
    if (recycle && slot < 0 && c->block == NULL) {
        if (c->ring[0] != NULL && Py_REFCNT(c->ring[0]) == 1) slot = 0;
        else if (c->ring[1] != NULL && Py_REFCNT(c->ring[1]) == 1) slot = 1;
        if (slot >= 0) {
            mm = Py_NewRef(c->ring[slot]);
            if (PyObject_GC_IsTracked(mm)) PyObject_GC_UnTrack(mm);
        }
    }
    if (slot < 0) {  /* a recycled message keeps its old items until it is filled: always a valid tuple */
        mm = mm_type->tp_alloc(mm_type, 5);
        if (mm == NULL) goto error;
    }
    /* ... then a check that no clear()/install ran meanwhile, ... */
    if (gen != c->generation) goto discard;
    /* ... then the hand-out itself, which runs no Python code: */
    c->pos = i + 1;
    Py_INCREF(next_obj);  /* one reference for the slot, one kept as next_obj */
    if (write_consumed(c, next_obj) < 0) goto error;
    c->delivered_messages += 1;
    c->delivered_bytes += size;
    Py_XSETREF(c->next_obj, next_obj);
    c->next_val = offset + 1;
    next_obj = NULL;
    /* Handed out. Decoders run after it, like Kafka's lazily decoding MessageAndMetadata. */
    if (c->key_decoder != NULL) {
        Py_SETREF(key, PyObject_CallOneArg(c->key_decoder, key));
        if (key == NULL) goto error;
    }
    if (c->value_decoder != NULL) {
        Py_SETREF(value, PyObject_CallOneArg(c->value_decoder, value));
        if (value == NULL) goto error;
    }
    if (slot >= 0) {
        /* Only the ring and this function hold mm (untracked since the check: unreachable). */
        PyObject *old[5];
        int k;
        for (k = 0; k < 5; k++) old[k] = PyTuple_GET_ITEM(mm, k);
        PyTuple_SET_ITEM(mm, 0, Py_NewRef(c->topic ? c->topic : Py_None));
        PyTuple_SET_ITEM(mm, 1, Py_NewRef(c->partition ? c->partition : Py_None));
        PyTuple_SET_ITEM(mm, 2, offset_obj);
        PyTuple_SET_ITEM(mm, 3, key);
        PyTuple_SET_ITEM(mm, 4, value);
#if PY_VERSION_HEX >= 0x030E0000
        ((PyTupleObject *)mm)->ob_hash = -1;  /* 3.14 caches a tuple's hash */
#endif
        if (!PyObject_GC_IsTracked(mm)) PyObject_GC_Track(mm);  /* a collection may have untracked it */
        c->ring_old = 1 - slot;
        for (k = 0; k < 5; k++) Py_XDECREF(old[k]);  /* bytes, ints, str, None: no Python code runs */
    } else {
        PyTuple_SET_ITEM(mm, 0, Py_NewRef(c->topic ? c->topic : Py_None));
        PyTuple_SET_ITEM(mm, 1, Py_NewRef(c->partition ? c->partition : Py_None));
        PyTuple_SET_ITEM(mm, 2, offset_obj);
        PyTuple_SET_ITEM(mm, 3, key);
        PyTuple_SET_ITEM(mm, 4, value);
        if (recycle) {
            Py_XSETREF(c->ring[c->ring_old], Py_NewRef(mm));  /* the old one is still the caller's, or dies */
            c->ring_old = 1 - c->ring_old;
        }
    }
    Py_DECREF(messages);
    return mm;

skip:
    if (gen == c->generation) c->pos = i + 1;
discard:
    if (slot >= 0 && !PyObject_GC_IsTracked(mm)) PyObject_GC_Track(mm);
    Py_XDECREF(offset_obj);
    Py_XDECREF(next_obj);
    Py_XDECREF(key);
    Py_XDECREF(value);
    Py_XDECREF(mm);
    Py_DECREF(messages);
    return NULL;
error:
    if (slot >= 0 && !PyObject_GC_IsTracked(mm)) PyObject_GC_Track(mm);
    Py_XDECREF(offset_obj);
    Py_XDECREF(next_obj);
    Py_XDECREF(key);
    Py_XDECREF(value);
    Py_XDECREF(mm);
    Py_DECREF(messages);
    return NULL;
}

static PyObject *cursor_iternext(Cursor *c) {
    if (c->mm_type == NULL) {
        PyErr_SetString(PyExc_TypeError, "Cursor.__init__ was not called");
        return NULL;
    }
    for (;;) {
        PyObject *r;
        while (c->messages != NULL && c->pos < c->n) {
            r = cursor_step(c);
            if (r != NULL) return r;
            if (PyErr_Occurred()) return NULL;
        }
        cursor_drop(c);
        r = PyObject_CallMethodNoArgs((PyObject *)c, str_refill);
        if (r == NULL) return NULL;
        Py_DECREF(r);
    }
}

static PyMethodDef cursor_methods[] = {
    {"_install", (PyCFunction)cursor_install, METH_VARARGS,
     "_install(info, messages, pos=0): make messages the current chunk, from index pos"},
    {"_clear", (PyCFunction)cursor_clear_method, METH_NOARGS, "_clear(): drop the current chunk"},
    {"_take_rest", (PyCFunction)cursor_take_rest, METH_NOARGS,
     "_take_rest() -> (info, messages, pos) of the current chunk, which is dropped; None if none"},
    {NULL}
};

static PyMemberDef cursor_members[] = {
    {"delivered_messages", T_LONGLONG, offsetof(Cursor, delivered_messages), 0, "messages handed out"},
    {"delivered_bytes", T_LONGLONG, offsetof(Cursor, delivered_bytes), 0, "key + value bytes handed out"},
    {NULL}
};

static PyGetSetDef cursor_getset[] = {
    {"_has_chunk", (getter)cursor_has_chunk, NULL, "whether the current chunk has messages left", NULL},
    {NULL}
};

static PyTypeObject CursorType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "zkconsumer.wire._speedups.Cursor",
    .tp_doc = "Per-message engine of zkconsumer.consumer.stream.ConsumerIterator (subclass it; define _refill).",
    .tp_basicsize = sizeof(Cursor),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)cursor_init,
    .tp_dealloc = (destructor)cursor_dealloc,
    .tp_traverse = (traverseproc)cursor_traverse,
    .tp_clear = (inquiry)cursor_clear_refs,
    .tp_iter = PyObject_SelfIter,
    .tp_iternext = (iternextfunc)cursor_iternext,
    .tp_methods = cursor_methods,
    .tp_members = cursor_members,
    .tp_getset = cursor_getset,
};

/* ------------------------------------------------------------------------ module */

/* ------------------------------------------------------------------------ socket receive */

/* After a recv or send on fd failed (errno set): -1 when fd is ready for ``events`` again
 * (call again), else the status to return (1 timeout, 2 signal, or an errno). */
static int wait_ready(int fd, short events, int timeout_ms) {
    if (errno == EINTR) return 2;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
        struct pollfd pfd;
        int k;
        pfd.fd = fd; pfd.events = events; pfd.revents = 0;
        k = poll(&pfd, 1, timeout_ms < 0 ? -1 : timeout_ms);
        if (k > 0) return -1;
        if (k == 0) return 1;
        if (errno == EINTR) return 2;
    }
    return errno ? errno : EIO;
}

/* A wait for at least this many more bytes sets SO_RCVLOWAT to what is missing, so the kernel
 * wakes the reader once, when (nearly) all of it is there, instead of at every segment the
 * broker sends: a 1 MB fetch response otherwise wakes its fetcher thread 3 to 4 times, and on a
 * busy machine each wake-up is a context switch and a wait for a core (zkconsumer perf, 1000 B, 3
 * brokers, the process's context switches per 1000 messages: 1 stream 7.6 -> 5.4, 2 streams and 2
 * fetchers 11.3 -> 9.4; consumer CPU per message -8% in both). The
 * kernel caps the mark at half the receive buffer; a peer that closes wakes the reader anyway. */
#define LOWAT_MIN (64 * 1024)

/* While a low-water mark is set, the reader still looks at least this often (ms) for bytes that
 * arrived below the mark, so a timeout is counted from the last byte to within this much. */
#define LOWAT_SLICE_MS 1000

/* Reads into p[*got..n) without the GIL: 0 when complete or at EOF (*got tells), 1 on timeout
 * (timeout_ms passed without a byte arriving; with a low-water mark set, that is noticed at most
 * LOWAT_SLICE_MS later), 2 when a signal interrupted a wait (call again after handling it), else
 * an errno. Leaves SO_RCVLOWAT at 1. */
static int recv_all(int fd, char *p, Py_ssize_t n, int timeout_ms, Py_ssize_t *got) {
    int status = 0, lowat = 1, quiet_ms = 0;  /* quiet_ms: waited with the mark set since the last byte */
    while (*got < n) {
        ssize_t r = recv(fd, p + *got, (size_t)(n - *got), MSG_DONTWAIT);
        if (r > 0) { *got += r; quiet_ms = 0; continue; }
        if (r == 0) break;  /* EOF */
        int wait_ms = timeout_ms;
#ifdef SO_RCVLOWAT
        if (errno == EAGAIN || errno == EWOULDBLOCK) {
            Py_ssize_t left = n - *got;
            int want = left < LOWAT_MIN ? 1 : left > INT_MAX ? INT_MAX : (int)left;
            if (want != lowat && setsockopt(fd, SOL_SOCKET, SO_RCVLOWAT, &want, sizeof want) == 0)
                lowat = want;
            errno = EAGAIN;
        }
        if (lowat > 1) {  /* a slice at a time: bytes below the mark must still count as progress */
            wait_ms = timeout_ms < 0 ? LOWAT_SLICE_MS : timeout_ms - quiet_ms;
            if (wait_ms > LOWAT_SLICE_MS) wait_ms = LOWAT_SLICE_MS;
        }
#endif
        status = wait_ready(fd, POLLIN, wait_ms);
        if (status == 1 && lowat > 1) {  /* the mark was not reached in this slice: did anything arrive? */
            r = recv(fd, p + *got, (size_t)(n - *got), MSG_DONTWAIT);
            if (r > 0) { *got += r; quiet_ms = 0; status = -1; }
            else if (r == 0) status = 0;
            else if (errno == EAGAIN || errno == EWOULDBLOCK) {
                quiet_ms += wait_ms;
                if (timeout_ms < 0 || quiet_ms < timeout_ms) status = -1;  /* not yet timed out: wait on */
            }
        }
        if (status >= 0) break;
        status = 0;
    }
#ifdef SO_RCVLOWAT
    if (lowat != 1) {
        int one = 1, saved = errno;
        setsockopt(fd, SOL_SOCKET, SO_RCVLOWAT, &one, sizeof one);
        errno = saved;
    }
#endif
    return status;
}

/* Sends p[*sent..n) without the GIL, with the same status codes as recv_all (1: a wait for
 * room timed out). */
static int send_all(int fd, const char *p, Py_ssize_t n, int timeout_ms, Py_ssize_t *sent) {
    while (*sent < n) {
        int status;
#ifdef MSG_NOSIGNAL
        ssize_t r = send(fd, p + *sent, (size_t)(n - *sent), MSG_DONTWAIT | MSG_NOSIGNAL);
#else
        ssize_t r = send(fd, p + *sent, (size_t)(n - *sent), MSG_DONTWAIT);
#endif
        if (r > 0) { *sent += r; continue; }
        if (r == 0) return EIO;
        if ((status = wait_ready(fd, POLLOUT, timeout_ms)) >= 0) return status;
    }
    return 0;
}

static PyObject *recv_failed(int status) {
    if (status == 1) return PyLong_FromLong(-1);  /* timeout: the caller raises socket.timeout */
    errno = status;
    return PyErr_SetFromErrno(PyExc_OSError);
}

/* recv_exactly(fd, buffer, timeout_ms) -> bytes read
 *
 * Fills the writable ``buffer`` from the socket ``fd`` with the GIL released for
 * the whole read, not once per recv() as a Python loop of sock.recv_into does:
 * a fetcher reading a multi-megabyte response otherwise needs the GIL back after
 * every segment, and each time waits up to sys.getswitchinterval() for a thread
 * that is iterating messages. Returns len(buffer), or fewer bytes if the peer
 * closed the connection (EOF; the caller reports it). ``timeout_ms`` (negative: no
 * bound) is like a socket timeout per operation: -1 is returned once that long passed
 * without a byte arriving (see recv_all: with the low-water mark, noticed within
 * LOWAT_SLICE_MS more; the caller raises socket.timeout). OSError on a socket error. Signals
 * interrupting a wait are handled (KeyboardInterrupt propagates). Works on
 * blocking and non-blocking descriptors alike (recv with MSG_DONTWAIT, then
 * poll for the rest). Plain TCP only: TLS sockets must not use it. */
static PyObject *py_recv_exactly(PyObject *self, PyObject *args) {
    int fd, timeout_ms, status;
    Py_buffer view;
    Py_ssize_t got = 0;
    (void)self;
    if (!PyArg_ParseTuple(args, "iw*i:recv_exactly", &fd, &view, &timeout_ms)) return NULL;
    for (;;) {
        Py_BEGIN_ALLOW_THREADS
        status = recv_all(fd, (char *)view.buf, view.len, timeout_ms, &got);
        Py_END_ALLOW_THREADS
        if (status != 2) break;
        if (PyErr_CheckSignals() < 0) { PyBuffer_Release(&view); return NULL; }
    }
    PyBuffer_Release(&view);
    if (status) return recv_failed(status);
    return PyLong_FromSsize_t(got);
}

/* recv_frame(fd, buffer, timeout_ms) -> (state, size, body bytes read)
 *
 * A size-prefixed response frame with one GIL release: the 4-byte big-endian size,
 * then, if 4 <= size <= len(buffer), the body into buffer[:size]. state 0: the size
 * was read; the body was read whole if got == size, cut by EOF if 0 < got < size or
 * (got == 0 and 4 <= size <= len(buffer)), not read at all if size is outside that
 * range (the caller reads it into a larger buffer, or rejects the size). state 1: a
 * wait timed out. state 2: EOF before the size was complete (got = its bytes read).
 * With ``request``, those bytes are sent first, in the same release of the GIL: a
 * fetcher then takes the GIL back once per round trip, not twice (each time it may
 * wait up to sys.getswitchinterval() behind a thread iterating messages). A send
 * error raises OSError, as sock.sendall would; a send timeout is state 1. */
static PyObject *py_recv_frame(PyObject *self, PyObject *args) {
    int fd, timeout_ms, status = 0;
    Py_buffer view, request = {0};
    unsigned char head[4];
    Py_ssize_t hgot = 0, bgot = 0, sent = 0;
    int32_t size = 0;
    (void)self;
    if (!PyArg_ParseTuple(args, "iw*i|y*:recv_frame", &fd, &view, &timeout_ms, &request)) return NULL;
    for (;;) {
        Py_BEGIN_ALLOW_THREADS
        if (request.buf != NULL)
            status = send_all(fd, (const char *)request.buf, request.len, timeout_ms, &sent);
        if (status == 0)
            status = recv_all(fd, (char *)head, 4, timeout_ms, &hgot);
        if (status == 0 && hgot == 4) {
            size = be32(head);
            if (size >= 4 && size <= view.len)
                status = recv_all(fd, (char *)view.buf, size, timeout_ms, &bgot);
        }
        Py_END_ALLOW_THREADS
        if (status != 2) break;
        if (PyErr_CheckSignals() < 0) {
            PyBuffer_Release(&view);
            if (request.buf != NULL) PyBuffer_Release(&request);
            return NULL;
        }
        status = 0;
    }
    PyBuffer_Release(&view);
    if (request.buf != NULL) PyBuffer_Release(&request);
    if (status == 1) return Py_BuildValue("(iin)", 1, 0, (Py_ssize_t)0);
    if (status) return recv_failed(status);
    if (hgot < 4) return Py_BuildValue("(iin)", 2, 0, hgot);
    return Py_BuildValue("(iin)", 0, (int)size, bgot);
}

static PyMethodDef module_methods[] = {
    {"recv_exactly", py_recv_exactly, METH_VARARGS,
     "recv_exactly(fd, buffer, timeout_ms) -> bytes read (< len(buffer) only at EOF, -1 on timeout); the GIL is released throughout"},
    {"recv_frame", py_recv_frame, METH_VARARGS,
     "recv_frame(fd, buffer, timeout_ms, request=None) -> (state, size, body bytes read): request sent (if given),\n"
     "then a size-prefixed frame read, in one GIL release"},
    {"crc32", py_crc32, METH_O, "crc32(data) -> zlib.crc32(data), with the decoder's implementation"},
    {"decode_inner", py_decode_inner, METH_VARARGS,
     "decode_inner(sets, fetch_offset) -> (block, bad_index, reason): the inner sets of consecutive wrappers as one block"},
    {"decode", py_decode, METH_VARARGS,
     "decode(buffer, start, fetch_offset, top_level, wrapper_offset=None)\n"
     "-> (block, stop, next_offset, status, bad_offset, reason); see the module source."},
    {"concat", py_concat, METH_O, "concat(blocks) -> one MessageBlock with the messages of all, in order"},
    {NULL}
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "zkconsumer.wire._speedups",
    "Optional C accelerator of zkconsumer.messageset and zkconsumer.consumer.stream.", -1, module_methods,
};

PyMODINIT_FUNC PyInit__speedups(void) {
    PyObject *m;
    crc_init();
#ifdef HAVE_CLMUL_CRC
    __builtin_cpu_init();
    have_clmul = __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse4.1");
#endif
    str_refill = PyUnicode_InternFromString("_refill");
    str_consumed_offset = PyUnicode_InternFromString("consumed_offset");
    str_topic = PyUnicode_InternFromString("topic");
    str_partition = PyUnicode_InternFromString("partition");
    if (!str_refill || !str_consumed_offset || !str_topic || !str_partition) return NULL;
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
        PyModule_AddStringConstant(m, "CRC32_IMPLEMENTATION",
#ifdef HAVE_CLMUL_CRC
                                   have_clmul ? "pclmul" :
#endif
                                   "tables") < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
