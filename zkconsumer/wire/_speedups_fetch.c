/*
 * fetch_response(body, item_type): the partitions of a Fetch v0 response body (after the
 * correlation id), read with the rules of zkconsumer.wire.protocol.FetchRequest.decode_response:
 *
 *   [topic count:int32 (-1 = none)] then per topic [name:string (int16 length, -1 = null, read as "")]
 *   [partition count:int32 (-1 = none)] then per partition [partition:int32][error:int16]
 *   [high watermark:int64][message set size:int32][message set]
 *
 * Returns a list with one ``item_type`` (a tuple subclass of 5 fields, FetchPartitionResponse) per
 * partition, in the response's order: ``(topic, partition, error_code, high_watermark, message set)``,
 * the message set a zero-copy slice of ``body`` (``body[start:end]``, so a read-only view stays one).
 * Bytes after the last topic are ignored, as the Python decoder ignores them.
 *
 * Returns ``None`` for any body the Python decoder refuses (a count or length past the end, an array
 * length below -1, a negative message set size, a topic name that is not UTF-8): the caller then runs
 * the Python decoder on it, which raises its own error, so the errors stay the Python decoder's,
 * message for message. Errors of Python itself (memory) are raised.
 */

#include "_speedups.h"

/* One partition of the response as an item_type (a tuple subclass), built as tuple.__new__ builds one. */
static PyObject *make_item(PyTypeObject *item_type, PyObject *topic, int32_t partition, int16_t error,
                           int64_t hw, PyObject *view) {
    PyObject *values[4];
    PyObject *item;
    int i;
    values[0] = PyLong_FromLong(partition);
    values[1] = PyLong_FromLong(error);
    values[2] = PyLong_FromLongLong(hw);
    if (values[0] == NULL || values[1] == NULL || values[2] == NULL) goto fail;
    item = item_type->tp_alloc(item_type, 5);
    if (item == NULL) goto fail;
    PyTuple_SET_ITEM(item, 0, Py_NewRef(topic));
    for (i = 0; i < 3; i++) PyTuple_SET_ITEM(item, i + 1, values[i]);
    PyTuple_SET_ITEM(item, 4, Py_NewRef(view));
    return item;
fail:
    for (i = 0; i < 3; i++) Py_XDECREF(values[i]);
    return NULL;
}

/* An array count at pos (-1 reads as 0); -1 when short or below -1 (the Python decoder's errors). */
static Py_ssize_t read_count(const unsigned char *p, Py_ssize_t len, Py_ssize_t *pos) {
    int32_t n;
    if (*pos + 4 > len) return -1;
    n = be32(p + *pos);
    *pos += 4;
    if (n < -1) return -1;
    return n < 0 ? 0 : n;
}

/* The requested partition's entry (borrowed; NULL: not requested) for topic/partition, or -1 with an
 * error set. The key is built as the fetcher builds it: a (topic, partition) tuple. */
static int find_entry(PyObject *requested, PyObject *topic, int32_t partition, PyObject **entry) {
    PyObject *number = PyLong_FromLong(partition), *key;
    if (number == NULL) return -1;
    key = PyTuple_Pack(2, topic, number);
    Py_DECREF(number);
    if (key == NULL) return -1;
    *entry = PyDict_GetItemWithError(requested, key);
    Py_DECREF(key);
    if (*entry == NULL && PyErr_Occurred()) return -1;
    if (*entry != NULL && (!PyTuple_Check(*entry) || PyTuple_GET_SIZE(*entry) != 2)) {
        PyErr_SetString(PyExc_TypeError, "fetch_walk: requested values must be (state, offset) tuples");
        return -1;
    }
    return 0;
}

/* fetch_walk's handling of one partition: the high watermark of an empty, error-free one is set on
 * its state; any other is appended to out as (state, offset, item). 0, or -1 with an error set. */
static int walk_partition(PyObject *out, PyObject *requested, PyTypeObject *item_type, PyObject *body,
                          PyObject *topic, int32_t partition, int16_t error, int64_t hw,
                          Py_ssize_t start, int32_t size) {
    static PyObject *hw_name = NULL;
    PyObject *entry, *slice, *item, *row;
    if (find_entry(requested, topic, partition, &entry) < 0) return -1;
    if (entry == NULL) return 0;
    if (size == 0 && error == 0) {
        PyObject *value;
        int failed;
        if (hw < 0) return 0;
        if (hw_name == NULL && (hw_name = PyUnicode_InternFromString("high_watermark")) == NULL) return -1;
        if ((value = PyLong_FromLongLong(hw)) == NULL) return -1;
        failed = PyObject_SetAttr(PyTuple_GET_ITEM(entry, 0), hw_name, value);
        Py_DECREF(value);
        return failed;
    }
    slice = PySequence_GetSlice(body, start, start + size);
    if (slice == NULL) return -1;
    item = make_item(item_type, topic, partition, error, hw, slice);
    Py_DECREF(slice);
    if (item == NULL) return -1;
    row = PyTuple_Pack(3, PyTuple_GET_ITEM(entry, 0), PyTuple_GET_ITEM(entry, 1), item);
    Py_DECREF(item);
    if (row == NULL) return -1;
    if (PyList_Append(out, row) < 0) {
        Py_DECREF(row);
        return -1;
    }
    Py_DECREF(row);
    return 0;
}

/* Both readers: every partition as an item (requested NULL), or fetch_walk's rows. Returns the list,
 * Py_None (new reference) for a body the Python decoder refuses, or NULL with an error set. */
static PyObject *read_fetch_response(PyObject *body, PyTypeObject *item_type, PyObject *requested,
                                     long long *total, long long *largest) {
    PyObject *out = NULL, *topic = NULL;
    Py_buffer view;
    const unsigned char *p;
    Py_ssize_t len, pos = 0, topics, t, parts, k;
    if (PyObject_GetBuffer(body, &view, PyBUF_SIMPLE) < 0) return NULL;
    p = (const unsigned char *)view.buf;
    len = view.len;
    out = PyList_New(0);
    if (out == NULL) goto error;
    topics = read_count(p, len, &pos);
    if (topics < 0) goto refused;
    for (t = 0; t < topics; t++) {
        int16_t n;
        if (pos + 2 > len) goto refused;
        n = (int16_t)((p[pos] << 8) | p[pos + 1]);
        pos += 2;
        Py_CLEAR(topic);
        if (n < 0) {
            topic = PyUnicode_FromStringAndSize("", 0);
        } else {
            if (n > len - pos) goto refused;
            topic = PyUnicode_DecodeUTF8((const char *)p + pos, n, "strict");
            if (topic == NULL) {
                if (!PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) goto error;
                PyErr_Clear();
                goto refused;
            }
            pos += n;
        }
        if (topic == NULL) goto error;
        parts = read_count(p, len, &pos);
        if (parts < 0) goto refused;
        for (k = 0; k < parts; k++) {
            int32_t partition, size;
            int16_t error;
            int64_t hw;
            if (pos + 18 > len) goto refused;
            partition = be32(p + pos);
            error = (int16_t)((p[pos + 4] << 8) | p[pos + 5]);
            hw = be64(p + pos + 6);
            size = be32(p + pos + 14);
            pos += 18;
            if (size < 0 || size > len - pos) goto refused;
            *total += size;
            if (size > *largest) *largest = size;
            if (requested != NULL) {
                if (walk_partition(out, requested, item_type, body, topic, partition, error, hw, pos, size) < 0)
                    goto error;
            } else {
                PyObject *slice = PySequence_GetSlice(body, pos, pos + size), *item;
                if (slice == NULL) goto error;
                item = make_item(item_type, topic, partition, error, hw, slice);
                Py_DECREF(slice);
                if (item == NULL) goto error;
                if (PyList_Append(out, item) < 0) {
                    Py_DECREF(item);
                    goto error;
                }
                Py_DECREF(item);
            }
            pos += size;
        }
    }
    Py_XDECREF(topic);
    PyBuffer_Release(&view);
    return out;
refused:
    Py_XDECREF(topic);
    Py_DECREF(out);
    PyBuffer_Release(&view);
    Py_RETURN_NONE;
error:
    Py_XDECREF(topic);
    Py_XDECREF(out);
    PyBuffer_Release(&view);
    return NULL;
}

static int check_item_type(PyObject *item_type, const char *who) {
    if (!PyType_Check(item_type) || !PyType_IsSubtype((PyTypeObject *)item_type, &PyTuple_Type)) {
        PyErr_Format(PyExc_TypeError, "%s: item_type must be a tuple subclass", who);
        return -1;
    }
    return 0;
}

PyObject *py_fetch_response(PyObject *module, PyObject *args) {
    PyObject *body, *item_type;
    long long total = 0, largest = 0;
    (void)module;
    if (!PyArg_ParseTuple(args, "OO:fetch_response", &body, &item_type)) return NULL;
    if (check_item_type(item_type, "fetch_response") < 0) return NULL;
    return read_fetch_response(body, (PyTypeObject *)item_type, NULL, &total, &largest);
}

/*
 * fetch_walk(body, item_type, requested): a Fetch v0 response body read as fetch_response reads it,
 * and walked as zkconsumer.wire.fetch_walk.walk_partitions walks the partitions (the reference):
 * ``requested`` maps ``(topic, partition)`` to the fetcher's ``(state, offset)``. Returns
 * ``(size, largest, rows)``: the message set bytes of the whole response and of its largest
 * partition, and ``(state, offset, item)`` per requested partition with data or an error, in the
 * response's order. An empty, error-free requested partition only has its high watermark (if not
 * negative) set as ``state.high_watermark``; partitions not requested are counted, nothing else.
 * ``None`` for a body the Python decoder refuses (as fetch_response; high watermarks of the
 * partitions before the refused byte may have been set: they are metrics only).
 */
PyObject *py_fetch_walk(PyObject *module, PyObject *args) {
    PyObject *body, *item_type, *requested, *rows, *out;
    long long total = 0, largest = 0;
    (void)module;
    if (!PyArg_ParseTuple(args, "OOO!:fetch_walk", &body, &item_type, &PyDict_Type, &requested)) return NULL;
    if (check_item_type(item_type, "fetch_walk") < 0) return NULL;
    rows = read_fetch_response(body, (PyTypeObject *)item_type, requested, &total, &largest);
    if (rows == NULL || rows == Py_None) return rows;
    out = Py_BuildValue("(LLN)", total, largest, rows);
    return out;
}

/*
 * fetch_request(correlation_id, client_id, max_wait_ms, min_bytes, partitions): the complete Fetch v0
 * request frame (size prefix, header, body) that zkconsumer.wire.protocol.FetchRequest.encode_frame
 * writes, byte for byte: replica id -1, the partitions grouped by topic in first-seen order (each
 * topic's partitions in their order), ``partitions`` a sequence of objects with ``topic``,
 * ``partition``, ``offset`` and ``max_bytes`` (FetchPartition).
 *
 * fetch_request(correlation_id, client_id, max_wait_ms, min_bytes, requested, max_bytes): the same
 * frame for a fetcher's ``requested`` dict (zkconsumer.wire.fetch_walk.WalkedFetchRequest), each
 * ``(topic, partition) -> (state, offset)`` item a partition at ``offset``, in the dict's order, every
 * one with ``max_bytes``.
 *
 * Returns ``None`` for anything the Python encoder would refuse or might treat otherwise (a value
 * that is not an int or out of its field's range, a topic or client id that is not a str, not
 * UTF-8-encodable or longer than 32767 bytes): the caller then encodes in Python, which raises its
 * own error.
 */

static PyObject *s_topic, *s_partition, *s_offset, *s_max_bytes;

/* An int field in [lo, hi] into *out; 0 when the object is not an int or out of range (error cleared). */
static int int_field(PyObject *o, long long lo, long long hi, long long *out) {
    int overflow = 0;
    long long v;
    if (!PyLong_Check(o)) return 0;
    v = PyLong_AsLongLongAndOverflow(o, &overflow);
    if (overflow || (v == -1 && PyErr_Occurred())) {
        PyErr_Clear();
        return 0;
    }
    if (v < lo || v > hi) return 0;
    *out = v;
    return 1;
}

/* Attribute ``name`` of ``o`` as an int field in [lo, hi]: 0 and *out set, 1 refused (not an int, out of
 * range), -1 an error (the attribute is missing: raised as the Python encoder raises it). */
static int int_attr(PyObject *o, PyObject *name, long long lo, long long hi, long long *out) {
    PyObject *v = PyObject_GetAttr(o, name);
    int ok;
    if (v == NULL) return -1;
    ok = int_field(v, lo, hi, out);
    Py_DECREF(v);
    return ok ? 0 : 1;
}

/* UTF-8 of a str no longer than a protocol string allows; NULL (error cleared) otherwise. */
static const char *string_field(PyObject *o, Py_ssize_t *n) {
    const char *s;
    if (!PyUnicode_Check(o)) return NULL;
    s = PyUnicode_AsUTF8AndSize(o, n);
    if (s == NULL) {
        PyErr_Clear();
        return NULL;
    }
    return *n > 0x7FFF ? NULL : s;
}

static unsigned char *put16(unsigned char *w, int v) { w[0] = (unsigned char)(v >> 8); w[1] = (unsigned char)v; return w + 2; }
static unsigned char *put32(unsigned char *w, int64_t v) {
    uint32_t u = (uint32_t)v;
    w[0] = (unsigned char)(u >> 24); w[1] = (unsigned char)(u >> 16); w[2] = (unsigned char)(u >> 8); w[3] = (unsigned char)u;
    return w + 4;
}
static unsigned char *put64(unsigned char *w, int64_t v) {
    put32(w, (int64_t)((uint64_t)v >> 32));
    return put32(w + 4, v);
}

typedef struct {
    PyObject *topic;      /* new reference */
    long long partition, offset, max_bytes;
    Py_ssize_t group;
} fetch_entry_t;

PyObject *py_fetch_request(PyObject *module, PyObject *args) {
    PyObject *cid_obj, *client_obj, *wait_obj, *min_obj, *parts_obj, *max_obj = NULL, *seq = NULL, *groups = NULL;
    PyObject *out = NULL;
    long long dict_max_bytes = 0;
    fetch_entry_t *entries = NULL;
    Py_ssize_t *group_first = NULL, *group_count = NULL, *order = NULL, *fill = NULL;
    Py_ssize_t n, i, ngroups = 0, client_len = 0, size;
    const char *client = NULL;
    long long cid, wait, min_bytes;
    unsigned char *w;
    int refused = 0;
    const long long I32_MIN = -2147483648LL, I32_MAX = 2147483647LL;
    (void)module;
    if (!PyArg_ParseTuple(args, "OOOOO|O:fetch_request", &cid_obj, &client_obj, &wait_obj, &min_obj, &parts_obj,
                          &max_obj))
        return NULL;
    if (max_obj != NULL && (!PyDict_Check(parts_obj) || !int_field(max_obj, I32_MIN, I32_MAX, &dict_max_bytes)))
        Py_RETURN_NONE;
    if (!int_field(cid_obj, I32_MIN, I32_MAX, &cid) || !int_field(wait_obj, I32_MIN, I32_MAX, &wait) ||
        !int_field(min_obj, I32_MIN, I32_MAX, &min_bytes))
        Py_RETURN_NONE;
    if (client_obj != Py_None && (client = string_field(client_obj, &client_len)) == NULL) Py_RETURN_NONE;
    if (s_topic == NULL) {
        s_topic = PyUnicode_InternFromString("topic");
        s_partition = PyUnicode_InternFromString("partition");
        s_offset = PyUnicode_InternFromString("offset");
        s_max_bytes = PyUnicode_InternFromString("max_bytes");
        if (!s_topic || !s_partition || !s_offset || !s_max_bytes) return NULL;
    }
    if (max_obj != NULL) {
        seq = PyDict_Items(parts_obj);  /* [((topic, partition), (state, offset))] */
    } else {
        if (!PyList_Check(parts_obj) && !PyTuple_Check(parts_obj)) Py_RETURN_NONE;
        seq = PySequence_Fast(parts_obj, "fetch_request: partitions must be a sequence");
    }
    if (seq == NULL) return NULL;
    n = PySequence_Fast_GET_SIZE(seq);
    entries = PyMem_Calloc(n ? n : 1, sizeof(fetch_entry_t));
    group_first = PyMem_Calloc(n ? n : 1, sizeof(Py_ssize_t));
    group_count = PyMem_Calloc(n ? n : 1, sizeof(Py_ssize_t));
    order = PyMem_Calloc(n ? n : 1, sizeof(Py_ssize_t));
    fill = PyMem_Calloc(n ? n : 1, sizeof(Py_ssize_t));
    groups = PyDict_New();
    if (!entries || !group_first || !group_count || !order || !fill || !groups) {
        PyErr_NoMemory();
        goto done;
    }
    size = 4 + 2 + 2 + 4 + 2 + (client ? client_len : 0) + 12 + 4 + 16 * n;
    for (i = 0; i < n && !refused; i++) {
        PyObject *p = PySequence_Fast_GET_ITEM(seq, i), *g;
        fetch_entry_t *e = &entries[i];
        Py_ssize_t tlen;
        if (max_obj != NULL) {  /* an item of requested */
            PyObject *key = PyTuple_GET_ITEM(p, 0), *value = PyTuple_GET_ITEM(p, 1);
            if (!PyTuple_Check(key) || PyTuple_GET_SIZE(key) != 2 || !PyTuple_Check(value) ||
                PyTuple_GET_SIZE(value) != 2) { refused = 1; break; }
            e->topic = Py_NewRef(PyTuple_GET_ITEM(key, 0));
            e->max_bytes = dict_max_bytes;
            if (!PyUnicode_CheckExact(e->topic) || string_field(e->topic, &tlen) == NULL ||
                !int_field(PyTuple_GET_ITEM(key, 1), I32_MIN, I32_MAX, &e->partition) ||
                !int_field(PyTuple_GET_ITEM(value, 1), INT64_MIN, INT64_MAX, &e->offset)) { refused = 1; break; }
        } else {
            e->topic = PyObject_GetAttr(p, s_topic);
            if (e->topic == NULL) goto done;
            if (!PyUnicode_CheckExact(e->topic) || string_field(e->topic, &tlen) == NULL) { refused = 1; break; }
            if ((refused = int_attr(p, s_partition, I32_MIN, I32_MAX, &e->partition)) < 0 ||
                (!refused && (refused = int_attr(p, s_offset, INT64_MIN, INT64_MAX, &e->offset)) < 0) ||
                (!refused && (refused = int_attr(p, s_max_bytes, I32_MIN, I32_MAX, &e->max_bytes)) < 0)) {
                refused = 0;
                goto done;
            }
            if (refused) break;
        }
        g = PyDict_GetItemWithError(groups, e->topic);
        if (g == NULL) {
            if (PyErr_Occurred()) goto done;
            g = PyLong_FromSsize_t(ngroups);
            if (g == NULL || PyDict_SetItem(groups, e->topic, g) < 0) { Py_XDECREF(g); goto done; }
            Py_DECREF(g);
            e->group = ngroups;
            group_first[ngroups++] = i;
            size += 2 + tlen + 4;
        } else {
            e->group = PyLong_AsSsize_t(g);
        }
        group_count[e->group]++;
    }
    if (refused || size > I32_MAX) {
        refused = 1;
        goto done;
    }
    /* a stable counting sort of the entries by group: each topic's partitions in their order */
    {
        Py_ssize_t start = 0, g;
        for (g = 0; g < ngroups; g++) { fill[g] = start; start += group_count[g]; }
        for (i = 0; i < n; i++) order[fill[entries[i].group]++] = i;
    }
    out = PyBytes_FromStringAndSize(NULL, size);
    if (out == NULL) goto done;
    w = (unsigned char *)PyBytes_AS_STRING(out);
    w = put32(w, size - 4);
    w = put16(w, 1);   /* api key: Fetch */
    w = put16(w, 0);   /* api version */
    w = put32(w, cid);
    w = put16(w, client ? (int)client_len : -1);
    if (client) { memcpy(w, client, client_len); w += client_len; }
    w = put32(w, -1);  /* replica id: a consumer */
    w = put32(w, wait);
    w = put32(w, min_bytes);
    w = put32(w, ngroups);
    {
        Py_ssize_t g, k = 0;
        for (g = 0; g < ngroups; g++) {
            Py_ssize_t tlen, j;
            const char *t = PyUnicode_AsUTF8AndSize(entries[group_first[g]].topic, &tlen);
            w = put16(w, (int)tlen);
            memcpy(w, t, tlen);
            w += tlen;
            w = put32(w, group_count[g]);
            for (j = 0; j < group_count[g]; j++, k++) {
                const fetch_entry_t *e = &entries[order[k]];
                w = put32(w, e->partition);
                w = put64(w, e->offset);
                w = put32(w, e->max_bytes);
            }
        }
    }
done:
    if (entries != NULL) for (i = 0; i < n; i++) Py_XDECREF(entries[i].topic);
    PyMem_Free(entries);
    PyMem_Free(group_first);
    PyMem_Free(group_count);
    PyMem_Free(order);
    PyMem_Free(fill);
    Py_XDECREF(groups);
    Py_XDECREF(seq);
    if (refused) {
        Py_XDECREF(out);
        Py_RETURN_NONE;
    }
    return out;
}
