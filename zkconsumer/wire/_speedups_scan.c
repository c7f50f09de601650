#include "_speedups.h"

/* Walking a message set (zkconsumer.wire._speedups): validating, counting and filling passes. No Python calls. */

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
void scan_validate(scan_t *s) {
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
void scan_count(scan_t *s, int64_t delta, int64_t fetch_offset) {
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

/* Pass 3: fill the block from [start, stop). No Python calls. */
void scan_fill(const scan_t *s, int64_t delta, int64_t fetch_offset, MessageBlock *b) {
    Py_ssize_t i = 0;
    int32_t kpos = 0, vpos = 0;
    scan_fill_at(s, delta, fetch_offset, b, &i, &kpos, &vpos);
}

/* scan_fill for one of several sets filling one block: continues at message *i and data
 * positions *kpos / *vpos, and advances them. No Python calls. */
void scan_fill_at(const scan_t *s, int64_t delta, int64_t fetch_offset, MessageBlock *b,
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
