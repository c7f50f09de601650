#include "_speedups.h"

/* decode(), decode_inner(), concat(): message sets into MessageBlocks (zkconsumer.wire._speedups). */

/* Release the GIL for the CRC pass only when there is enough work to be worth a GIL round trip. */
#ifndef NOGIL_THRESHOLD
#define NOGIL_THRESHOLD (64 * 1024)
#endif

PyObject *py_decode(PyObject *module, PyObject *args) {
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

PyObject *py_concat(PyObject *module, PyObject *arg) {
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

/* decode_inner(sets, fetch_offset) -> (block, bad_index, reason)
 *     ``sets``: a sequence of ``(buffer, wrapper_offset or None)``, the decompressed inner
 *     message sets of consecutive compressed wrappers (read-only buffers). Validates each
 *     as decode(..., top_level=False) does and returns the messages >= fetch_offset of all
 *     of them in ONE MessageBlock: (block, -1, None), with no per-wrapper block and no
 *     concat copy. If set k is corrupt it returns (None, k, reason) and decodes nothing.
 *     The validating, counting and copying passes run without the GIL for large input. */
PyObject *py_decode_inner(PyObject *module, PyObject *args) {
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
