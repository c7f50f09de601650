#include "_speedups.h"

/* Cursor: the per-message engine of zkconsumer.consumer.stream.ConsumerIterator (zkconsumer.wire._speedups). */

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

PyTypeObject CursorType = {
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

int cursor_init_module(void) {
    str_refill = PyUnicode_InternFromString("_refill");
    str_consumed_offset = PyUnicode_InternFromString("consumed_offset");
    str_topic = PyUnicode_InternFromString("topic");
    str_partition = PyUnicode_InternFromString("partition");
    return str_refill && str_consumed_offset && str_topic && str_partition ? 0 : -1;
}

