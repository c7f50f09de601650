/*
 * zkconsumer.zookeeper._heartbeat: ZooKeeper heartbeats sent by a thread that
 * never needs the GIL (Linux only; optional, see heartbeat.py for the design).
 *
 * Heartbeat()
 *     One native thread (started on the first attach, joined by stop()) that
 *     keeps one ZooKeeper connection alive while the client is idle:
 *
 *     attach(fd, wake_fd, interval, jitter, answer_timeout)
 *         Serve the connected socket ``fd`` (duplicated, as is ``wake_fd``:
 *         the thread uses descriptors of its own, so a number the client
 *         closes and the system reuses is never written to). Whenever nothing
 *         was written on it for ``interval`` + a random share of ``jitter``
 *         seconds, the thread sends a ZooKeeper ping (xid -2, type 11). A ping
 *         sent at ``s`` after which the kernel received no byte at all on the
 *         socket by ``s + answer_timeout`` (TCP_INFO's tcpi_last_data_recv;
 *         bytes received but not yet read count) makes the connection
 *         *suspect*: the thread writes one byte to ``wake_fd`` (the client's
 *         wake-up socket, which its connection thread watches) and goes on
 *         pinging. The client drops and replaces a suspect connection, which
 *         it can do only while its own thread runs: a client stalled on the
 *         GIL keeps its connection, and the pings that keep a slow server's
 *         session alive.
 *     suspect()
 *         Whether the served connection became suspect and still nothing came
 *         back since that ping (a late answer clears it); the flag is cleared.
 *     detach()
 *         Stop serving the socket (closes the duplicates). Idempotent.
 *     write_begin() / write_end(last)
 *         Bracket every write of the client on the socket: the thread never
 *         writes in between, so frames never interleave; write_end counts as
 *         traffic (the next ping is due ``interval`` after it). ``last`` true:
 *         no more pings on this attachment (the client sent Close, or its write
 *         failed). write_begin waits, without the GIL, while a ping is being
 *         written (12 bytes, non-blocking, at most ``answer_timeout``).
 *     answered()
 *         The send time (time.monotonic() seconds) of the oldest ping not yet
 *         answered, removed from the record; None if none is recorded. The
 *         client's reader calls it for each ping reply it reads.
 *     stop()
 *         Detach and join the thread (it wakes at once). Idempotent.
 *     pings, drops
 *         Pings sent, and pings that went unanswered.
 *
 * All state is guarded by one mutex; the thread holds it only while deciding
 * and while writing one 12-byte ping. In a child process after fork() every
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
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define PENDING_MAX 32
/* A receive up to this long before a ping counts as its answer: tcpi_last_data_recv has jiffy granularity. */
#define RECEIVE_SLACK_S 0.02
/* An unsendable ping (socket buffer full) is tried again this much later. */
#define RETRY_S 0.05

static const unsigned char PING_FRAME[12] = {0, 0, 0, 8, 0xff, 0xff, 0xff, 0xfe, 0, 0, 0, 11};

typedef struct {
    PyObject_HEAD
    pthread_mutex_t lock;
    pthread_cond_t cond;
    pthread_t thread;
    int thread_started;
    int stopping;
    int fd;              /* our duplicate of the served socket, -1 while detached */
    int wake_fd;         /* our duplicate of the client's wake-up socket, -1 while detached */
    int last;            /* no more pings on this attachment */
    double suspect;      /* send time of a ping that went unanswered on this attachment, < 0 if none */
    int writers;         /* client writes in progress */
    double interval, jitter, answer_timeout;
    double due;          /* when the next ping is due */
    double watched;      /* send time of the ping awaiting the watchdog's check, < 0 if none */
    double pending[PENDING_MAX];
    int head, count;     /* unanswered pings' send times, oldest first */
    unsigned long long pings, drops;
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

/* Caller holds the lock: something was written at ``now``. */
static void schedule_after_write(Heartbeat *self, double now) {
    self->due = now + self->interval + self->jitter * next_random(self);
}

static int in_owner(Heartbeat *self) {
    return self->owner == getpid();
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
    self->watched = -1.0;
    self->last = 0;
    self->suspect = -1.0;
}

/* Whether the kernel received data on ``fd`` at or after ``since`` (unknown: yes). */
static int received_since(int fd, double since, double now) {
    struct tcp_info info;
    socklen_t len = sizeof(info);
    if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info, &len) != 0 ||
        len < offsetof(struct tcp_info, tcpi_last_data_recv) + sizeof(info.tcpi_last_data_recv))
        return 1;
    return now - (double)info.tcpi_last_data_recv / 1000.0 >= since - RECEIVE_SLACK_S;
}

/* Caller holds the lock, no client write in progress: write one ping frame.
 * Returns 1 sent, 0 try again later (socket buffer full), -1 the connection is broken. */
static int send_ping(Heartbeat *self) {
    size_t sent = 0;
    double give_up = monotonic_now() + self->answer_timeout;
    while (sent < sizeof(PING_FRAME)) {
        ssize_t n = send(self->fd, PING_FRAME + sent, sizeof(PING_FRAME) - sent, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (n > 0) {
            sent += (size_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            if (sent == 0) return 0;  /* nothing written: the frame boundary is intact */
            /* half a frame is out: finish it (bounded) before anyone else writes */
            double left = give_up - monotonic_now();
            struct pollfd p = {self->fd, POLLOUT, 0};
            if (left <= 0 || poll(&p, 1, (int)(left * 1000.0) + 1) < 0) return -1;
            continue;
        }
        return -1;
    }
    return 1;
}

static void *run(void *arg) {
    Heartbeat *self = (Heartbeat *)arg;
    pthread_mutex_lock(&self->lock);
    while (!self->stopping) {
        double now = monotonic_now();
        double wake = now + 3600.0;
        if (self->fd >= 0 && !self->last) {
            if (self->watched >= 0) {
                double check = self->watched + self->answer_timeout;
                if (now >= check) {
                    if (!received_since(self->fd, self->watched, now)) {
                        static const char byte = 0;
                        self->suspect = self->watched;  /* the client drops the connection when its thread runs */
                        self->drops++;
                        (void)send(self->wake_fd, &byte, 1, MSG_DONTWAIT | MSG_NOSIGNAL);
                    }
                    self->watched = -1.0;
                } else if (check < wake) {
                    wake = check;
                }
            }
            if (self->writers == 0 && self->watched < 0) {
                if (now >= self->due) {
                    int status = send_ping(self);
                    now = monotonic_now();
                    if (status > 0) {
                        if (self->count == PENDING_MAX) {  /* answers not read for a long time: forget the oldest */
                            self->head = (self->head + 1) % PENDING_MAX;
                            self->count--;
                        }
                        self->pending[(self->head + self->count) % PENDING_MAX] = now;
                        self->count++;
                        self->pings++;
                        self->watched = now;
                        schedule_after_write(self, now);
                    } else if (status == 0) {
                        self->due = now + RETRY_S;
                    } else {
                        self->last = 1;  /* broken: the client's own read or write fails next */
                    }
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
    if (self->owner != 0) {
        PyErr_SetString(PyExc_RuntimeError, "Heartbeat is already initialised");
        return -1;
    }
    pthread_condattr_t attr;
    if (pthread_condattr_init(&attr) != 0 || pthread_condattr_setclock(&attr, CLOCK_MONOTONIC) != 0 ||
        pthread_cond_init(&self->cond, &attr) != 0) {
        PyErr_SetString(PyExc_OSError, "cannot create the heartbeat's condition variable");
        return -1;
    }
    pthread_condattr_destroy(&attr);
    if (pthread_mutex_init(&self->lock, NULL) != 0) {
        pthread_cond_destroy(&self->cond);
        PyErr_SetString(PyExc_OSError, "cannot create the heartbeat's mutex");
        return -1;
    }
    self->fd = self->wake_fd = -1;
    self->watched = self->suspect = -1.0;
    self->rng = ((uint64_t)getpid() << 32) ^ (uint64_t)(monotonic_now() * 1e9) ^ (uint64_t)(uintptr_t)self;
    if (self->rng == 0) self->rng = 88172645463325252ULL;
    self->owner = getpid();
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
    if (self->owner != 0 && in_owner(self)) {
        stop_thread(self);
        pthread_mutex_destroy(&self->lock);
        pthread_cond_destroy(&self->cond);
    }
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *Heartbeat_attach(Heartbeat *self, PyObject *args) {
    int fd, wake_fd;
    double interval, jitter, answer_timeout;
    if (!PyArg_ParseTuple(args, "iiddd:attach", &fd, &wake_fd, &interval, &jitter, &answer_timeout)) return NULL;
    if (self->owner == 0 || !in_owner(self)) {
        PyErr_SetString(PyExc_RuntimeError, "Heartbeat used in a process it was not created in");
        return NULL;
    }
    if (!(interval > 0) || !(jitter >= 0) || !(answer_timeout > 0) || answer_timeout >= interval) {
        PyErr_SetString(PyExc_ValueError, "need interval > answer_timeout > 0 and jitter >= 0");
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
        schedule_after_write(self, monotonic_now());  /* the handshake was just written */
        if (!self->thread_started) {
            error = pthread_create(&self->thread, NULL, run, self);
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
    if (self->owner == 0 || !in_owner(self)) Py_RETURN_NONE;
    Py_BEGIN_ALLOW_THREADS
    pthread_mutex_lock(&self->lock);
    drop_fd(self);
    pthread_cond_broadcast(&self->cond);
    pthread_mutex_unlock(&self->lock);
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

static PyObject *Heartbeat_write_begin(Heartbeat *self, PyObject *Py_UNUSED(ignored)) {
    if (self->owner == 0 || !in_owner(self)) Py_RETURN_NONE;
    Py_BEGIN_ALLOW_THREADS
    pthread_mutex_lock(&self->lock);  /* waits out a ping being written */
    self->writers++;
    pthread_mutex_unlock(&self->lock);
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

static PyObject *Heartbeat_write_end(Heartbeat *self, PyObject *arg) {
    int last = PyObject_IsTrue(arg);
    if (last < 0) return NULL;
    if (self->owner == 0 || !in_owner(self)) Py_RETURN_NONE;
    Py_BEGIN_ALLOW_THREADS
    pthread_mutex_lock(&self->lock);
    if (self->writers > 0) self->writers--;
    schedule_after_write(self, monotonic_now());
    if (last && self->fd >= 0) self->last = 1;
    pthread_cond_broadcast(&self->cond);
    pthread_mutex_unlock(&self->lock);
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

static PyObject *Heartbeat_answered(Heartbeat *self, PyObject *Py_UNUSED(ignored)) {
    double sent = -1.0;
    if (self->owner == 0 || !in_owner(self)) Py_RETURN_NONE;
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
    if (self->owner == 0 || !in_owner(self)) Py_RETURN_FALSE;
    Py_BEGIN_ALLOW_THREADS
    pthread_mutex_lock(&self->lock);
    if (self->suspect >= 0 && self->fd >= 0)
        suspect = !received_since(self->fd, self->suspect, monotonic_now());
    self->suspect = -1.0;
    pthread_mutex_unlock(&self->lock);
    Py_END_ALLOW_THREADS
    return PyBool_FromLong(suspect);
}

static PyObject *Heartbeat_stop(Heartbeat *self, PyObject *Py_UNUSED(ignored)) {
    if (self->owner != 0 && in_owner(self)) stop_thread(self);
    Py_RETURN_NONE;
}

static PyObject *Heartbeat_get_counter(Heartbeat *self, void *which) {
    unsigned long long value;
    if (self->owner == 0 || !in_owner(self)) return PyLong_FromLong(0);
    Py_BEGIN_ALLOW_THREADS
    pthread_mutex_lock(&self->lock);
    value = which ? self->drops : self->pings;
    pthread_mutex_unlock(&self->lock);
    Py_END_ALLOW_THREADS
    return PyLong_FromUnsignedLongLong(value);
}

static PyMethodDef Heartbeat_methods[] = {
    {"attach", (PyCFunction)Heartbeat_attach, METH_VARARGS, "attach(fd, wake_fd, interval, jitter, answer_timeout)"},
    {"suspect", (PyCFunction)Heartbeat_suspect, METH_NOARGS, "whether a ping went unanswered (clears the flag)"},
    {"detach", (PyCFunction)Heartbeat_detach, METH_NOARGS, "stop serving the socket"},
    {"write_begin", (PyCFunction)Heartbeat_write_begin, METH_NOARGS, "the client starts writing"},
    {"write_end", (PyCFunction)Heartbeat_write_end, METH_O, "write_end(last): the client wrote"},
    {"answered", (PyCFunction)Heartbeat_answered, METH_NOARGS, "send time of the oldest unanswered ping, or None"},
    {"stop", (PyCFunction)Heartbeat_stop, METH_NOARGS, "detach and join the thread"},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Heartbeat_getset[] = {
    {"pings", (getter)Heartbeat_get_counter, NULL, "pings sent", NULL},
    {"drops", (getter)Heartbeat_get_counter, NULL, "pings that went unanswered (connections made suspect)", (void *)1},
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
