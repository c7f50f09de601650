#include "_speedups.h"

#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <sys/socket.h>

/* recv_exactly(), recv_frame(): socket reads and writes without the GIL (zkconsumer.wire._speedups). */

static inline uint16_t be16(const unsigned char *p) { return (uint16_t)((p[0] << 8) | p[1]); }

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
 * fetchers 11.3 -> 9.4; consumer CPU per message -8% in both). Small responses too: a broker
 * writes a fetch response in pieces (its header, then each partition's header and message set),
 * so even a one-message response over 6 partitions comes in several segments (a consumer reading
 * 1,000 msg/s, benchmarks.cpu_split: 2.2-2.5 voluntary context switches per message with the mark
 * only from 64 KB, 1.4-1.5 with it from 8 bytes). The 4-byte size is read without a mark. The
 * kernel caps the mark at half the receive buffer; a peer that closes wakes the reader anyway. */
#define LOWAT_MIN 8

/* While a low-water mark is set, the reader still looks at least this often (ms) for bytes that
 * arrived below the mark, so a timeout is counted from the last byte to within this much. */
#define LOWAT_SLICE_MS 1000

/* Reads into p[*got..n) without the GIL: 0 when complete or at EOF (*got tells), 1 on timeout
 * (timeout_ms passed without a byte arriving; with a low-water mark set, that is noticed at most
 * LOWAT_SLICE_MS later), 2 when a signal interrupted a wait (call again after handling it), else
 * an errno. ``poll_first``: wait for bytes before the first read (the caller just sent a request:
 * a read now would only fail with EAGAIN). ``coming``: bytes the peer is sure to send from p[0]
 * on, if more than n (a wait may then set its mark that high; 0: n). ``*lowat``: the socket's
 * SO_RCVLOWAT, kept up to date here; the caller puts it back to 1 (reset_lowat) unless it keeps
 * track of it (recv_frame's ``lowat``). */
static int recv_all(int fd, char *p, Py_ssize_t n, Py_ssize_t coming, int timeout_ms, Py_ssize_t *got,
                    int poll_first, int *lowat) {
    int status = 0, quiet_ms = 0;  /* quiet_ms: waited with the mark set since the last byte */
    while (*got < n) {
        ssize_t r;
        if (poll_first) {  /* nothing to read yet (see below): wait before reading */
            poll_first = 0;
            r = -1;
            errno = EAGAIN;
        } else {
            r = recv(fd, p + *got, (size_t)(n - *got), MSG_DONTWAIT);
        }
        /* A short read took every byte there was: the next recv would fail with EAGAIN, so wait
         * first (bytes that came meanwhile count towards the mark, and the wait returns at once). */
        if (r > 0) { poll_first = r < n - *got; *got += r; quiet_ms = 0; continue; }
        if (r == 0) break;  /* EOF */
        int wait_ms = timeout_ms;
#ifdef SO_RCVLOWAT
        if (errno == EAGAIN || errno == EWOULDBLOCK) {
            Py_ssize_t left = (coming > n ? coming : n) - *got;
            int want = left < LOWAT_MIN ? 1 : left > INT_MAX ? INT_MAX : (int)left;
            if (want != *lowat && setsockopt(fd, SOL_SOCKET, SO_RCVLOWAT, &want, sizeof want) == 0)
                *lowat = want;
            errno = EAGAIN;
        }
        if (*lowat > 1) {  /* a slice at a time: bytes below the mark must still count as progress */
            wait_ms = timeout_ms < 0 ? LOWAT_SLICE_MS : timeout_ms - quiet_ms;
            if (wait_ms > LOWAT_SLICE_MS) wait_ms = LOWAT_SLICE_MS;
        }
#endif
        status = wait_ready(fd, POLLIN, wait_ms);
        if (status == 1 && *lowat > 1) {  /* the mark was not reached in this slice: did anything arrive? */
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
    return status;
}

/* Puts the socket's SO_RCVLOWAT back to 1 after recv_all set it (errno kept). */
static void reset_lowat(int fd, int *lowat) {
#ifdef SO_RCVLOWAT
    if (*lowat != 1) {
        int one = 1, saved = errno;
        setsockopt(fd, SOL_SOCKET, SO_RCVLOWAT, &one, sizeof one);
        *lowat = 1;
        errno = saved;
    }
#else
    (void)fd; (void)lowat;
#endif
}

/* The fewest bytes, its size prefix included, a broker can answer the request ``frame`` with, if
 * that is a Fetch v0 request: its every topic and partition, each with an empty message set
 * (size 4, correlation id 4, topic count 4, then per topic its name (2 + length) and partition
 * count (4), and per partition 18 bytes). 0 for any other request, or a frame that does not parse.
 * The wait for an answer's first bytes sets the socket's mark that high: a broker writes a
 * response in pieces (its header, then each partition's header and message set), and woken at the
 * first piece, a reader found the rest missing in about four rounds of ten at 1,000 msg/s and
 * slept again (issue 44). A broker that answered with fewer bytes would be read anyway, once
 * a LOWAT_SLICE_MS wait passed. */
static Py_ssize_t fetch_answer_floor(const unsigned char *f, Py_ssize_t n) {
    Py_ssize_t at, floor = 12;
    int32_t topics, t;
    int16_t client;
    if (n < 14 || be16(f + 4) != 1 || be16(f + 6) != 0) return 0;  /* size, api key 1 (Fetch), version 0 */
    client = (int16_t)be16(f + 12);
    at = 14 + (client > 0 ? client : 0) + 12;  /* client id, then replica id, max wait, min bytes */
    if (at + 4 > n) return 0;
    topics = be32(f + at);
    at += 4;
    if (topics < 0) return 0;
    for (t = 0; t < topics; t++) {
        int16_t len;
        int32_t parts;
        if (at + 2 > n) return 0;
        len = (int16_t)be16(f + at);
        if (len < 0 || at + 2 + len + 4 > n) return 0;
        at += 2 + len;
        parts = be32(f + at);
        at += 4;
        if (parts < 0 || parts > (n - at) / 16) return 0;
        at += (Py_ssize_t)parts * 16;
        floor += 2 + len + 4 + (Py_ssize_t)parts * 18;
    }
    return floor;
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
PyObject *py_recv_exactly(PyObject *self, PyObject *args) {
    int fd, timeout_ms, status, lowat = 1;
    Py_buffer view;
    Py_ssize_t got = 0;
    (void)self;
    if (!PyArg_ParseTuple(args, "iw*i:recv_exactly", &fd, &view, &timeout_ms)) return NULL;
    for (;;) {
        Py_BEGIN_ALLOW_THREADS
        status = recv_all(fd, (char *)view.buf, view.len, 0, timeout_ms, &got, 0, &lowat);
        reset_lowat(fd, &lowat);
        Py_END_ALLOW_THREADS
        if (status != 2) break;
        if (PyErr_CheckSignals() < 0) { PyBuffer_Release(&view); return NULL; }
    }
    PyBuffer_Release(&view);
    if (status) return recv_failed(status);
    return PyLong_FromSsize_t(got);
}

/* recv_frame(fd, buffer, timeout_ms, request=None, lowat=0) -> (state, size, body bytes read, mark)
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
 * error raises OSError, as sock.sendall would; a send timeout is state 1.
 *
 * ``lowat`` (``mark``): the socket's SO_RCVLOWAT. 0 (the default): it is 1, and is put back to 1
 * before returning. Positive: what the previous call returned as ``mark`` on this socket; a call
 * that returns state 0 leaves the mark as its last wait set it and returns it, any other outcome
 * (another state, an exception) puts it back to 1 first. A fetcher asks for answers of the same
 * floor round after round, so a kept mark spares two setsockopt calls per round (issue 44); whoever
 * reads the socket any other way puts the mark back to 1 first (recv_exactly assumes 1). */
PyObject *py_recv_frame(PyObject *self, PyObject *args) {
    int fd, timeout_ms, status = 0, lowat = 0, keep;
    Py_ssize_t coming = 0;  /* bytes the answer surely has, size prefix included (0: not known) */
    Py_buffer view, request = {0};
    PyObject *request_obj = Py_None;
    int have_request;
    unsigned char head[4];
    Py_ssize_t hgot = 0, bgot = 0, sent = 0;
    int32_t size = 0;
    (void)self;
    if (!PyArg_ParseTuple(args, "iw*i|Oi:recv_frame", &fd, &view, &timeout_ms, &request_obj, &lowat)) return NULL;
    /* ``request``: None, or a bytes-like object (as ``y*`` takes it: a str is refused, not encoded). */
    if (request_obj != Py_None) {
        if (PyUnicode_Check(request_obj)) {
            PyErr_SetString(PyExc_TypeError, "recv_frame() request must be a bytes-like object or None, not str");
            PyBuffer_Release(&view);
            return NULL;
        }
        if (PyObject_GetBuffer(request_obj, &request, PyBUF_SIMPLE) < 0) {
            PyBuffer_Release(&view);
            return NULL;
        }
    }
    have_request = request_obj != Py_None;
    keep = lowat > 0;
    if (!keep) lowat = 1;
    if (have_request) coming = fetch_answer_floor((const unsigned char *)request.buf, request.len);
    for (;;) {
        Py_BEGIN_ALLOW_THREADS
        if (have_request)
            status = send_all(fd, (const char *)request.buf, request.len, timeout_ms, &sent);
        if (status == 0)  /* just sent (not after a signal): poll before the first read, one syscall less */
            status = recv_all(fd, (char *)head, 4, hgot == 0 ? coming : 0, timeout_ms, &hgot,
                              have_request && hgot == 0 && sent > 0, &lowat);
        if (status == 0 && hgot == 4) {
            size = be32(head);
            if (size >= 4 && size <= view.len)
                status = recv_all(fd, (char *)view.buf, size, 0, timeout_ms, &bgot, 0, &lowat);
        }
        if (!keep || status != 0) reset_lowat(fd, &lowat);
        Py_END_ALLOW_THREADS
        if (status != 2) break;
        if (PyErr_CheckSignals() < 0) {
            PyBuffer_Release(&view);
            if (have_request) PyBuffer_Release(&request);
            return NULL;
        }
        status = 0;
    }
    PyBuffer_Release(&view);
    if (have_request) PyBuffer_Release(&request);
    if (status == 1) return Py_BuildValue("(iini)", 1, 0, (Py_ssize_t)0, lowat);
    if (status) return recv_failed(status);
    if (hgot < 4) return Py_BuildValue("(iini)", 2, 0, hgot, lowat);
    return Py_BuildValue("(iini)", 0, (int)size, bgot, lowat);
}
