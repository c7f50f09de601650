/*
 * arrow_batch(block, topic, partition, start, stop, import_from_c, schema): rows [start, stop) of a
 * MessageBlock as an Arrow record batch, handed to Arrow through its C data interface in one call.
 *
 * The columns are zkconsumer.consumer.arrow.SCHEMA's: topic (utf8, ``topic`` repeated), partition
 * (int32, ``partition`` repeated), offset (int64), key and value (binary). The last three are the
 * block's own buffers (no copy), each child array's ``offset`` set to ``start``; the first two are
 * written into memory allocated with the batch. ``import_from_c(address, schema)`` is pyarrow's
 * ``RecordBatch._import_from_c``: called once with the address of an ArrowArray (a struct array of
 * five children) on this function's stack, which it moves out. Its result is returned.
 *
 * Lifetime (the C data interface's rules): the batch's memory (the structs, the two written columns)
 * is one allocation, counted by the arrays that can still be released: the parent and each of its
 * five children (a consumer may move a child out and release it on its own). The allocation holds a
 * reference to the block, so the block's buffers live while any array built on them does. The last
 * release frees it and drops that reference, taking the GIL: Arrow may release from any thread.
 *
 * Why (issue 44): a live stream's batches have one row each. Building one from Python took five
 * ``Array.from_buffers`` and a ``RecordBatch.from_arrays``, about 10 µs; this is one call.
 * zkconsumer.consumer.arrow uses it for small batches only: a large batch's topic column comes from
 * a cached buffer there instead of one written per batch here.
 */

#include "_speedups.h"

/* The Arrow C data interface's array (https://arrow.apache.org/docs/format/CDataInterface.html). */
struct ArrowArray {
    int64_t length;
    int64_t null_count;
    int64_t offset;
    int64_t n_buffers;
    int64_t n_children;
    const void **buffers;
    struct ArrowArray **children;
    struct ArrowArray *dictionary;
    void (*release)(struct ArrowArray *);
    void *private_data;
};

#define COLUMNS 5

/* One allocation per batch: the children, their buffer lists, the written columns after it. */
typedef struct {
    int live;                        /* arrays not yet released: the parent and each child */
    PyObject *block;                 /* owned */
    struct ArrowArray children[COLUMNS];
    struct ArrowArray *child_ptrs[COLUMNS];
    const void *parent_buffers[1];
    const void *child_buffers[COLUMNS][3];
    /* then: int32 topic offsets [n + 1], int32 partitions [n], topic bytes [n * len(topic)] */
} holder_t;

/* Drops ``counts`` of h's count, the caller holding the GIL (or the interpreter gone); the last frees h. */
static void holder_drop(holder_t *h, int counts, int interpreter_alive) {
    h->live -= counts;
    if (h->live == 0) {
        if (interpreter_alive) Py_DECREF(h->block);  /* at interpreter exit the block goes with everything else */
        PyMem_RawFree(h);
    }
}

/* Arrow may release from any thread, so the count is kept under the GIL: taken once per release. */
static void holder_release(holder_t *h, int counts) {
    PyGILState_STATE gil;
    if (!Py_IsInitialized()) {
        holder_drop(h, counts, 0);
        return;
    }
    gil = PyGILState_Ensure();
    holder_drop(h, counts, 1);
    PyGILState_Release(gil);
}

/* A child moved out of its parent and released on its own. */
static void release_child(struct ArrowArray *a) {
    a->release = NULL;
    holder_release((holder_t *)a->private_data, 1);
}

/* The parent, with the children still in place (a moved-out child's release is NULL here: whoever moved
 * it releases it, and it keeps the allocation until then). One count for the parent, one per child. */
static void release_parent(struct ArrowArray *a) {
    holder_t *h = (holder_t *)a->private_data;
    int i, counts = 1;
    a->release = NULL;
    for (i = 0; i < COLUMNS; i++)
        if (h->children[i].release != NULL) {
            h->children[i].release = NULL;
            counts++;
        }
    holder_release(h, counts);
}

static void set_child(holder_t *h, int i, int64_t length, int64_t offset, int64_t null_count, int64_t n_buffers,
                      const void *b0, const void *b1, const void *b2) {
    struct ArrowArray *c = &h->children[i];
    h->child_buffers[i][0] = b0;
    h->child_buffers[i][1] = b1;
    h->child_buffers[i][2] = b2;
    c->length = length;
    c->null_count = null_count;
    c->offset = offset;
    c->n_buffers = n_buffers;
    c->n_children = 0;
    c->buffers = h->child_buffers[i];
    c->children = NULL;
    c->dictionary = NULL;
    c->release = release_child;
    c->private_data = h;
    h->child_ptrs[i] = c;
}

/* A binary column's null count for rows [start, stop): exact when known, -1 (Arrow counts) otherwise. */
static int64_t slice_nulls(Py_ssize_t nulls, Py_ssize_t all, Py_ssize_t start, Py_ssize_t stop) {
    if (nulls == 0) return 0;
    if (nulls == all) return stop - start;
    return (start == 0 && stop == all) ? nulls : -1;
}

PyObject *py_arrow_batch(PyObject *module, PyObject *args) {
    PyObject *block_obj, *topic_obj, *import_from_c, *schema, *address, *result;
    MessageBlock *b;
    Py_ssize_t start, stop, n, i, topic_len, extra;
    long partition;
    const char *topic;
    holder_t *h;
    int32_t *topic_offsets, *partitions;
    char *topic_data;
    struct ArrowArray parent;
    (void)module;
    if (!PyArg_ParseTuple(args, "O!UlnnOO:arrow_batch", &MessageBlockType, &block_obj, &topic_obj, &partition,
                          &start, &stop, &import_from_c, &schema))
        return NULL;
    b = (MessageBlock *)block_obj;
    if (start < 0 || stop < start || stop > b->n) {
        PyErr_Format(PyExc_IndexError, "rows [%zd, %zd) of a block of %zd", start, stop, b->n);
        return NULL;
    }
    if (partition < INT32_MIN || partition > INT32_MAX) {
        PyErr_Format(PyExc_OverflowError, "partition %ld is not an int32", partition);
        return NULL;
    }
    topic = PyUnicode_AsUTF8AndSize(topic_obj, &topic_len);
    if (topic == NULL) return NULL;
    n = stop - start;
    if (topic_len > 0 && n > (INT32_MAX / topic_len) - 1) {
        PyErr_Format(PyExc_OverflowError, "%zd rows of a %zd-byte topic overflow a string column", n, topic_len);
        return NULL;
    }
    extra = (Py_ssize_t)sizeof(int32_t) * (2 * n + 1) + n * topic_len;
    h = (holder_t *)PyMem_RawMalloc(sizeof(holder_t) + (size_t)extra + 1);
    if (h == NULL) return PyErr_NoMemory();
    topic_offsets = (int32_t *)(h + 1);
    partitions = topic_offsets + n + 1;
    topic_data = (char *)(partitions + n);
    for (i = 0; i <= n; i++) topic_offsets[i] = (int32_t)(i * topic_len);
    for (i = 0; i < n; i++) {
        partitions[i] = (int32_t)partition;
        memcpy(topic_data + i * topic_len, topic, (size_t)topic_len);
    }
    h->block = Py_NewRef(block_obj);
    h->live = 1 + COLUMNS;
    set_child(h, 0, n, 0, 0, 3, NULL, topic_offsets, topic_data);
    set_child(h, 1, n, 0, 0, 2, NULL, partitions, NULL);
    set_child(h, 2, n, start, 0, 2, NULL, b->off, NULL);
    set_child(h, 3, n, start, slice_nulls(b->key_nulls, b->n, start, stop), 3,
              b->key_nulls ? (const void *)b->kvalid : NULL, b->koff, b->kdata);
    set_child(h, 4, n, start, slice_nulls(b->value_nulls, b->n, start, stop), 3,
              b->value_nulls ? (const void *)b->vvalid : NULL, b->voff, b->vdata);
    h->parent_buffers[0] = NULL;
    parent.length = n;
    parent.null_count = 0;
    parent.offset = 0;
    parent.n_buffers = 1;
    parent.n_children = COLUMNS;
    parent.buffers = h->parent_buffers;
    parent.children = h->child_ptrs;
    parent.dictionary = NULL;
    parent.release = release_parent;
    parent.private_data = h;
    address = PyLong_FromVoidPtr(&parent);
    if (address == NULL) {
        release_parent(&parent);
        return NULL;
    }
    result = PyObject_CallFunctionObjArgs(import_from_c, address, schema, NULL);
    Py_DECREF(address);
    if (parent.release != NULL) release_parent(&parent);  /* not moved out (an error): ours to release */
    return result;
}
