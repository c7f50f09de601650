/*
 * zkconsumer.zookeeper._heartbeat: ZooKeeper heartbeats sent by a thread that
 * never needs the GIL (Linux only; optional, see heartbeat.py for the design).
 *
 * Heartbeat()
 *     One native thread (started on the first attach, joined by stop()) that
 *     keeps one ZooKeeper connection alive while the client is idle, and
 *     watches it for a server that stopped answering:
 *
 *     attach(fd, wake_fd, interval, jitter, answer_timeout, since_receive=False)
 *         Serve the connected socket ``fd`` (duplicated, as is ``wake_fd``:
 *         the thread uses descriptors of its own, so a number the client
 *         closes and the system reuses is never written to). OSError if the
 *         kernel does not count the bytes a socket received.
 *         Pings: whenever nothing was written on it for ``interval`` + a
 *         random share of ``jitter`` seconds, the thread sends a ZooKeeper
 *         ping (xid -2, type 11).
 *         Watch: a write (a ping, or a frame of the client's, see write())
 *         after which the kernel received no byte at all on the socket within
 *         ``answer_timeout`` (TCP_INFO's tcpi_bytes_received, Linux 4.1+: bytes
 *         received but not yet read count) makes the connection *suspect*. With
 *         ``since_receive`` the time is counted from the last byte the kernel
 *         received on the socket (TCP_INFO's tcpi_last_data_recv) instead of from
 *         the write: ZooKeeper's Java client's rule (a server that sent nothing for
 *         its read timeout while a write is outstanding is dropped), and then
 *         ``answer_timeout`` may exceed ``interval``; the watched write still gets
 *         half of ``answer_timeout`` (after a freeze of the whole process the
 *         server is given time to answer the first write, where the Java client
 *         drops the connection at once). Once suspect, the thread
 *         writes one byte to ``wake_fd`` (the client's wake-up socket, which
 *         its connection thread watches) and goes on pinging. The client drops
 *         and replaces a suspect connection, which it can do only while its
 *         own thread runs: a client stalled on the GIL keeps its connection,
 *         and the pings that keep a slow server's session alive.
 *     write(frame, timeout)
 *         Write the client's whole ``frame`` (bytes-like) on the served socket,
 *         with the GIL released and the thread's pings held off, waiting for
 *         room at most ``timeout`` seconds in all. Returns False (nothing
 *         written) when no socket is attached: the client writes it itself.
 *         True once written; None if the timeout passed (part of the frame
 *         may be out: the connection is unusable); OSError on a socket error.
 *         Counts as traffic: the next ping is due ``interval`` after it.
 *     closing()
 *         The client is about to send Close: no more pings on this attachment
 *         (the watch goes on, so a server that never answers the Close makes
 *         the connection suspect like any other write).
 *     suspect()
 *         Whether the served connection became suspect and still nothing came
 *         back since that write (a late answer clears it); the flag is cleared.
 *     answered()
 *         The send time (time.monotonic() seconds, taken just before the
 *         write) of the oldest ping not yet answered, removed from the record;
 *         None if none is recorded. The client's reader calls it for each
 *         ping reply it reads.
 *     detach()
 *         Stop serving the socket (closes the duplicates). Idempotent.
 *     stop()
 *         Detach and join the thread (it wakes at once; a ping being written
 *         may take up to ``answer_timeout``). Idempotent.
 *     pings, suspicions
 *         Pings sent; writes that went unanswered past ``answer_timeout``.
 *
 * All state is guarded by one mutex. The thread holds it while deciding and
 * while writing one 12-byte ping; write() holds it while writing a frame.
 * Neither ever holds it while waiting for the GIL. The thread blocks every
 * signal (they go to Python's threads). In a child process after fork() every
 * method is a no-op (the thread does not exist there).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#ifndef __linux__
#error "zkconsumer.zookeeper._heartbeat needs Linux (TCP_INFO); the package falls back to kazoo's pings"
#endif

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <linux/tcp.h>  /* the kernel's struct tcp_info (glibc's lacks tcpi_bytes_received) */
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define PENDING_MAX 32
/* An unsendable ping (socket buffer full) is tried again this much later. */
#define RETRY_S 0.05

static const unsigned char PING_FRAME[12] = {0, 0, 0, 8, 0xff, 0xff, 0xff, 0xfe, 0, 0, 0, 11};

typedef struct {
    PyObject_HEAD
    pthread_mutex_t lock;
    pthread_cond_t cond;
    pthread_t thread;
    int initialised;
    int thread_started;
    int stopping;
    int fd;              /* our duplicate of the served socket, -1 while detached */
    int wake_fd;         /* our duplicate of the client's wake-up socket, -1 while detached */
    int quiet;           /* no more pings on this attachment (Close is being sent) */
    int since_receive;   /* answer_timeout counts from the last byte received, not from the write */
    double interval, jitter, answer_timeout;
    double last_write;   /* when the last write (ping or frame) on this attachment started */
    double due;          /* when the next ping is due */
    double watched;      /* start of the oldest write not followed by a received byte, < 0 if none */
    double first_since;  /* start of the first write since a byte was last received (its mark is the last
                          * write's), < 0 if none on this attachment */
    double suspect;      /* start of a write that went unanswered, < 0 if none */
    /* bytes the kernel had received on the socket when those writes started */
    uint64_t last_write_mark, watched_mark, suspect_mark;
    double pending[PENDING_MAX];
    int head, count;     /* unanswered pings' send times, oldest first */
    unsigned long long pings, suspicions;
    uint64_t rng;
    pid_t owner;
} Heartbeat;

static double monotonic_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static double next_random(Heartbeat *self) {  /* xorshift64*: uniform in [0, 1) */
    self->rng ^= self->rng >> 12;
    self->rng ^= self->rng << 25;
    self->rng ^= self->rng >> 27;
    return (double)((self->rng * 2685821657736338717ULL) >> 11) / 9007199254740992.0;
}

static int usable(Heartbeat *self) {
    return self->initialised && self->owner == getpid();
}

/* Bytes the kernel received on ``fd`` so far (read or not); 0 with *ok = 0 if it cannot tell. */
static uint64_t received_bytes(int fd, int *ok) {
    struct tcp_info info;
    socklen_t len = sizeof(info);
    *ok = getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info, &len) == 0 &&
          len >= offsetof(struct tcp_info, tcpi_bytes_received) + sizeof(info.tcpi_bytes_received);
    return *ok ? (uint64_t)info.tcpi_bytes_received : 0;
}

/* When (monotonic seconds) the kernel last received data on ``fd``; ``fallback`` if it cannot tell. */
static double last_received_at(int fd, double now, double fallback) {
    struct tcp_info info;
    socklen_t len = sizeof(info);
    if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info, &len) != 0 ||
        len < offsetof(struct tcp_info, tcpi_last_data_recv) + sizeof(info.tcpi_last_data_recv))
        return fallback;
    return now - (double)info.tcpi_last_data_recv / 1000.0;
}

/* Whether anything was received on ``fd`` since ``mark`` (yes when the kernel cannot tell). */
static int received_since(int fd, uint64_t mark) {
    int ok;
    uint64_t now = received_bytes(fd, &ok);
    return !ok || now > mark;
}

/* Caller holds the lock: a write (ping or frame) started at ``started``, the socket having received ``mark``. */
static void note_write(Heartbeat *self, double started, uint64_t mark) {
    if (self->first_since < 0 || mark != self->last_write_mark)  /* bytes came in since the last write */
        self->first_since = started;
    self->last_write = started;
    self->last_write_mark = mark;
    self->due = started + self->interval + self->jitter * next_random(self);
    if (self->watched < 0) {
        self->watched = started;
        self->watched_mark = mark;
    }
}

/* Caller holds the lock: forget the served socket. */
static void drop_fd(Heartbeat *self) {
    if (self->fd >= 0) {
        close(self->fd);
        self->fd = -1;
    }
    if (self->wake_fd >= 0) {
        close(self->wake_fd);
        self->wake_fd = -1;
    }
    self->head = self->count = 0;
    self->watched = self->suspect = self->first_since = -1.0;
    self->quiet = 0;
}

/* Wait (bounded by ``give_up``) until ``fd`` can take more bytes: 1 ready, 0 timed out, -1 error. */
static int wait_writable(int fd, double give_up) {
    for (;;) {
        double left = give_up - monotonic_now();
        if (left <= 0) return 0;
        struct pollfd p = {fd, POLLOUT, 0};
        int n = poll(&p, 1, (int)(left * 1000.0) + 1);
        if (n > 0) return 1;
        if (n < 0 && errno != EINTR) return -1;
    }
}

/* Caller holds the lock: write all of ``data`` by ``give_up``. 1 done, 0 timed out, -1 error (errno). */
static int write_all(int fd, const unsigned char *data, size_t size, double give_up) {
    size_t sent = 0;
    while (sent < size) {
        ssize_t n = send(fd, data + sent, size - sent, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (n > 0) {
            sent += (size_t)n;
        } else if (n < 0 && errno == EINTR) {
            continue;
        } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            int ready = wait_writable(fd, give_up);
            if (ready <= 0) return ready;
        } else {
            if (n == 0) errno = EPIPE;
            return -1;
        }
    }
    return 1;
}

/* Caller holds the lock, a socket is attached: ping. */
static void ping(Heartbeat *self) {
    int ok;
    uint64_t mark = received_bytes(self->fd, &ok);
    double started = monotonic_now();
    ssize_t n = send(self->fd, PING_FRAME, sizeof(PING_FRAME), MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
        self->due = started + RETRY_S;  /* nothing written; a frame of the client's fills the socket: the watch runs */
        return;
    }
    if (n > 0 && (size_t)n < sizeof(PING_FRAME) &&
        write_all(self->fd, PING_FRAME + n, sizeof(PING_FRAME) - (size_t)n, started + self->answer_timeout) <= 0)
        n = -1;  /* half a frame is out and the rest cannot follow: the stream is unusable */
    if (n < 0) {
        shutdown(self->fd, SHUT_RDWR);  /* the client's reader sees the end and reconnects */
        self->quiet = 1;
        return;
    }
    if (self->count < PENDING_MAX) {  /* full (answers unread for ~23 intervals): record nothing newer */
        self->pending[(self->head + self->count) % PENDING_MAX] = started;
        self->count++;
    }
    self->pings++;
    note_write(self, started, mark);
}

static void *run(void *arg) {
    Heartbeat *self = (Heartbeat *)arg;
    pthread_mutex_lock(&self->lock);
    while (!self->stopping) {
        double now = monotonic_now();
        double wake = now + 3600.0;
        if (self->fd >= 0) {
            if (self->watched >= 0) {
                double check = self->watched + self->answer_timeout;
                if (self->since_receive) {
                    /* no byte since the watched write: the last one came before it. The write itself
                     * gets half the window, so a process that was frozen (its own silence, not the
                     * server's) gives the server time to answer the first write after it */
                    double silent = last_received_at(self->fd, now, self->watched) + self->answer_timeout;
                    double fresh = self->watched + self->answer_timeout / 2.0;
                    check = silent > fresh ? silent : fresh;
                }
                if (now >= check) {
                    if (received_since(self->fd, self->watched_mark)) {
                        /* answered; the last write is the one to watch now, unless it was answered too */
                        if (received_since(self->fd, self->last_write_mark)) {
                            self->watched = -1.0;
                        } else {
                            /* the oldest write no byte followed: the first since the last byte came, not
                             * the last write (which would be given half the window again, and a member
                             * writing every T/4 would be dropped from a hung server only at T) */
                            self->watched = self->first_since;
                            self->watched_mark = self->last_write_mark;
                        }
                    } else {
                        static const char byte = 0;
                        self->suspect = self->watched;  /* the client drops the connection when its thread runs */
                        self->suspect_mark = self->watched_mark;
                        self->suspicions++;
                        self->watched = -1.0;
                        (void)send(self->wake_fd, &byte, 1, MSG_DONTWAIT | MSG_NOSIGNAL);
                    }
                    continue;
                }
                if (check < wake) wake = check;
            }
            if (!self->quiet) {
                if (now >= self->due) {
                    ping(self);
                    continue;
                }
                if (self->due < wake) wake = self->due;
            }
        }
        struct timespec until;
        until.tv_sec = (time_t)wake;
        until.tv_nsec = (long)((wake - (double)until.tv_sec) * 1e9);
        if (until.tv_nsec >= 1000000000L) until.tv_nsec = 999999999L;
        pthread_cond_timedwait(&self->cond, &self->lock, &until);
    }
    pthread_mutex_unlock(&self->lock);
    return NULL;
}

static int Heartbeat_init(Heartbeat *self, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwds, ":Heartbeat", kwlist)) return -1;
    if (self->initialised) {
        PyErr_SetString(PyExc_RuntimeError, "Heartbeat is already initialised");
        return -1;
    }
    pthread_condattr_t attr;
    if (pthread_condattr_init(&attr) != 0) {
        PyErr_SetString(PyExc_OSError, "cannot create the heartbeat's condition variable");
        return -1;
    }
    int failed = pthread_condattr_setclock(&attr, CLOCK_MONOTONIC) != 0 || pthread_cond_init(&self->cond, &attr) != 0;
    pthread_condattr_destroy(&attr);
    if (failed) {
        PyErr_SetString(PyExc_OSError, "cannot create the heartbeat's condition variable");
        return -1;
    }
    if (pthread_mutex_init(&self->lock, NULL) != 0) {
        pthread_cond_destroy(&self->cond);
        PyErr_SetString(PyExc_OSError, "cannot create the heartbeat's mutex");
        return -1;
    }
    self->fd = self->wake_fd = -1;
    self->watched = self->suspect = self->first_since = -1.0;
    self->rng = ((uint64_t)getpid() << 32) ^ (uint64_t)(monotonic_now() * 1e9) ^ (uint64_t)(uintptr_t)self;
    if (self->rng == 0) self->rng = 88172645463325252ULL;
    self->owner = getpid();
    self->initialised = 1;
    return 0;
}

/* Stop and join the thread, forget the socket. */
static void stop_thread(Heartbeat *self) {
    int started;
    Py_BEGIN_ALLOW_THREADS
    pthread_mutex_lock(&self->lock);
    self->stopping = 1;
    drop_fd(self);
    started = self->thread_started;
    self->thread_started = 0;
    pthread_cond_broadcast(&self->cond);
    pthread_mutex_unlock(&self->lock);
    if (started) pthread_join(self->thread, NULL);
    Py_END_ALLOW_THREADS
}

static void Heartbeat_dealloc(Heartbeat *self) {
    if (usable(self)) {
        stop_thread(self);
        pthread_mutex_destroy(&self->lock);
        pthread_cond_destroy(&self->cond);
    }
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* Start the thread with every signal blocked (so they reach Python's threads). */
static int start_thread(Heartbeat *self) {
    sigset_t all, previous;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &previous);
    int error = pthread_create(&self->thread, NULL, run, self);
    pthread_sigmask(SIG_SETMASK, &previous, NULL);
    return error;
}

static PyObject *Heartbeat_attach(Heartbeat *self, PyObject *args) {
    int fd, wake_fd;
    double interval, jitter, answer_timeout;
    int since_receive = 0;
    if (!PyArg_ParseTuple(args, "iiddd|p:attach", &fd, &wake_fd, &interval, &jitter, &answer_timeout, &since_receive))
        return NULL;
    if (!usable(self)) {
        PyErr_SetString(PyExc_RuntimeError, "Heartbeat used in a process it was not created in");
        return NULL;
    }
    if (!(interval > 0) || !(jitter >= 0) || !(answer_timeout > 0) || (!since_receive && answer_timeout >= interval)) {
        PyErr_SetString(PyExc_ValueError, "need interval > 0, answer_timeout > 0 (below interval unless since_receive) "
                                          "and jitter >= 0");
        return NULL;
    }
    int counted;
    (void)received_bytes(fd, &counted);
    if (!counted) {
        PyErr_SetString(PyExc_OSError, "this kernel's TCP_INFO has no tcpi_bytes_received (Linux 4.1+)");
        return NULL;
    }
    int copy = fcntl(fd, F_DUPFD_CLOEXEC, 0);
    if (copy < 0) return PyErr_SetFromErrno(PyExc_OSError);
    int wake_copy = fcntl(wake_fd, F_DUPFD_CLOEXEC, 0);
    if (wake_copy < 0) {
        PyErr_SetFromErrno(PyExc_OSError);
        close(copy);
        return NULL;
    }
    int error = 0;
    Py_BEGIN_ALLOW_THREADS
    pthread_mutex_lock(&self->lock);
    if (self->stopping) {
        error = -1;
    } else {
        drop_fd(self);
        self->fd = copy;
        self->wake_fd = wake_copy;
        self->interval = interval;
        self->jitter = jitter;
        self->answer_timeout = answer_timeout;
        self->since_receive = since_receive;
        self->last_write = monotonic_now();  /* the handshake was just answered: nothing to watch */
        self->due = self->last_write + interval + jitter * next_random(self);
        if (!self->thread_started) {
            error = start_thread(self);
            if (error == 0) self->thread_started = 1;
            else self->fd = self->wake_fd = -1;
        }
        pthread_cond_broadcast(&self->cond);
    }
    pthread_mutex_unlock(&self->lock);
    Py_END_ALLOW_THREADS
    if (error != 0) {
        close(copy);
        close(wake_copy);
        if (error < 0) PyErr_SetString(PyExc_RuntimeError, "Heartbeat is stopped");
        else {
            errno = error;
            PyErr_SetFromErrno(PyExc_OSError);
        }
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyObject *Heartbeat_detach(Heartbeat *self, PyObject *Py_UNUSED(ignored)) {
    if (!usable(self)) Py_RETURN_NONE;
    Py_BEGIN_ALLOW_THREADS
    pthread_mutex_lock(&self->lock);
    drop_fd(self);
    pthread_cond_broadcast(&self->cond);
    pthread_mutex_unlock(&self->lock);
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

static PyObject *Heartbeat_write(Heartbeat *self, PyObject *args) {
    Py_buffer frame;
    double timeout;
    if (!PyArg_ParseTuple(args, "y*d:write", &frame, &timeout)) return NULL;
    int status = 2, error = 0;  /* 2: not attached */
    if (usable(self)) {
        Py_BEGIN_ALLOW_THREADS
        pthread_mutex_lock(&self->lock);  /* waits out a ping being written, never the GIL */
        if (self->fd >= 0) {
            int ok;
            uint64_t mark = received_bytes(self->fd, &ok);
            double started = monotonic_now();
            status = write_all(self->fd, (const unsigned char *)frame.buf, (size_t)frame.len, started + timeout);
            error = errno;
            note_write(self, started, mark);
            pthread_cond_broadcast(&self->cond);
        }
        pthread_mutex_unlock(&self->lock);
        Py_END_ALLOW_THREADS
    }
    PyBuffer_Release(&frame);
    if (status == 2) Py_RETURN_FALSE;
    if (status == 1) Py_RETURN_TRUE;
    if (status == 0) Py_RETURN_NONE;
    errno = error;
    return PyErr_SetFromErrno(PyExc_OSError);
}

static PyObject *Heartbeat_closing(Heartbeat *self, PyObject *Py_UNUSED(ignored)) {
    if (!usable(self)) Py_RETURN_NONE;
    Py_BEGIN_ALLOW_THREADS
    pthread_mutex_lock(&self->lock);
    if (self->fd >= 0) self->quiet = 1;
    pthread_mutex_unlock(&self->lock);
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

static PyObject *Heartbeat_answered(Heartbeat *self, PyObject *Py_UNUSED(ignored)) {
    double sent = -1.0;
    if (!usable(self)) Py_RETURN_NONE;
    Py_BEGIN_ALLOW_THREADS
    pthread_mutex_lock(&self->lock);
    if (self->count > 0) {
        sent = self->pending[self->head];
        self->head = (self->head + 1) % PENDING_MAX;
        self->count--;
    }
    pthread_mutex_unlock(&self->lock);
    Py_END_ALLOW_THREADS
    if (sent < 0) Py_RETURN_NONE;
    return PyFloat_FromDouble(sent);
}

static PyObject *Heartbeat_suspect(Heartbeat *self, PyObject *Py_UNUSED(ignored)) {
    int suspect = 0;
    if (!usable(self)) Py_RETURN_FALSE;
    Py_BEGIN_ALLOW_THREADS
    pthread_mutex_lock(&self->lock);
    if (self->suspect >= 0 && self->fd >= 0) suspect = !received_since(self->fd, self->suspect_mark);
    self->suspect = -1.0;
    pthread_mutex_unlock(&self->lock);
    Py_END_ALLOW_THREADS
    return PyBool_FromLong(suspect);
}

static PyObject *Heartbeat_stop(Heartbeat *self, PyObject *Py_UNUSED(ignored)) {
    if (usable(self)) stop_thread(self);
    Py_RETURN_NONE;
}

static PyObject *Heartbeat_get_counter(Heartbeat *self, void *which) {
    unsigned long long value;
    if (!usable(self)) return PyLong_FromLong(0);
    Py_BEGIN_ALLOW_THREADS
    pthread_mutex_lock(&self->lock);
    value = which ? self->suspicions : self->pings;
    pthread_mutex_unlock(&self->lock);
    Py_END_ALLOW_THREADS
    return PyLong_FromUnsignedLongLong(value);
}

static PyMethodDef Heartbeat_methods[] = {
    {"attach", (PyCFunction)Heartbeat_attach, METH_VARARGS,
     "attach(fd, wake_fd, interval, jitter, answer_timeout, since_receive=False)"},
    {"write", (PyCFunction)Heartbeat_write, METH_VARARGS, "write(frame, timeout): the client's frame, without the GIL"},
    {"closing", (PyCFunction)Heartbeat_closing, METH_NOARGS, "no more pings: the client sends Close"},
    {"suspect", (PyCFunction)Heartbeat_suspect, METH_NOARGS, "whether a write went unanswered (clears the flag)"},
    {"answered", (PyCFunction)Heartbeat_answered, METH_NOARGS, "send time of the oldest unanswered ping, or None"},
    {"detach", (PyCFunction)Heartbeat_detach, METH_NOARGS, "stop serving the socket"},
    {"stop", (PyCFunction)Heartbeat_stop, METH_NOARGS, "detach and join the thread"},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Heartbeat_getset[] = {
    {"pings", (getter)Heartbeat_get_counter, NULL, "pings sent", NULL},
    {"suspicions", (getter)Heartbeat_get_counter, NULL, "writes that went unanswered past the answer timeout",
     (void *)1},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject HeartbeatType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "zkconsumer.zookeeper._heartbeat.Heartbeat",
    .tp_basicsize = sizeof(Heartbeat),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "ZooKeeper pings from a native thread; see the module's source for the contract.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Heartbeat_init,
    .tp_dealloc = (destructor)Heartbeat_dealloc,
    .tp_methods = Heartbeat_methods,
    .tp_getset = Heartbeat_getset,
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "zkconsumer.zookeeper._heartbeat",
    "ZooKeeper heartbeats from a thread that never needs the GIL.", -1, NULL,
};

PyMODINIT_FUNC PyInit__heartbeat(void) {
    if (PyType_Ready(&HeartbeatType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module_def);
    if (m == NULL) return NULL;
    Py_INCREF(&HeartbeatType);
    if (PyModule_AddObject(m, "Heartbeat", (PyObject *)&HeartbeatType) < 0) {
        Py_DECREF(&HeartbeatType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
