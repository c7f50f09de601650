#include "_speedups.h"

/* MessageBlock: the messages of one chunk in Arrow layout (zkconsumer.wire._speedups). */

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

MessageBlock *block_alloc(Py_ssize_t n, Py_ssize_t key_bytes, Py_ssize_t value_bytes,
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

PyTypeObject BlockBufferType = {
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

PyTypeObject MessageBlockType = {
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
