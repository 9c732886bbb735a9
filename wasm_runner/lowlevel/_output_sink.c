/* Sink: a guest output stream kept in C until the host takes it.
 *
 * wasmtime calls a WASI custom stream's write callback on a thread of its own. A Python
 * callback there makes a thread state and takes the GIL for every write: about 40 us of
 * the 80 a printed line took. `write` below keeps the bytes in a buffer instead, with no
 * Python; the host takes them once the call is over (`take`). Where the host must see the bytes as
 * they come (a listener streams them, or the buffer would pass `limit`, the room left in
 * the call's capture), the buffer is handed to `forward` first, then the write, in order.
 *
 * The state is shared by the Python object and wasmtime (which frees its side through
 * `release` when the store goes), so it is reference-counted and freed by the last one. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef ptrdiff_t (*forward_fn)(void *key, const unsigned char *data, size_t size);

typedef struct {
    int refs;                /* atomic: the Python object, and wasmtime's stream once lent */
    pthread_mutex_t lock;
    unsigned char *data;
    size_t size, capacity;
    size_t limit;            /* bytes kept here at most; past them everything is forwarded */
    int forward_all;
    forward_fn forward;
    void *key;
} sink_state;

static void
state_release(void *opaque)
{
    sink_state *state = opaque;
    if (__atomic_sub_fetch(&state->refs, 1, __ATOMIC_ACQ_REL) == 0) {
        pthread_mutex_destroy(&state->lock);
        free(state->data);
        free(state);
    }
}

static int
append(sink_state *state, const unsigned char *data, size_t size)
{
    if (state->size + size > state->capacity) {
        size_t capacity = state->capacity ? state->capacity : 4096;
        while (capacity < state->size + size)
            capacity *= 2;
        unsigned char *grown = realloc(state->data, capacity);
        if (grown == NULL)
            return -1;
        state->data = grown;
        state->capacity = capacity;
    }
    memcpy(state->data + state->size, data, size);
    state->size += size;
    return 0;
}

static ptrdiff_t
state_write(void *opaque, const unsigned char *data, size_t size)
{
    sink_state *state = opaque;
    pthread_mutex_lock(&state->lock);
    if (!state->forward_all && state->size + size <= state->limit && append(state, data, size) == 0) {
        pthread_mutex_unlock(&state->lock);
        return (ptrdiff_t)size;
    }
    unsigned char *held = state->data;
    size_t held_size = state->size;
    forward_fn forward = state->forward;
    void *key = state->key;
    state->data = NULL;
    state->size = state->capacity = 0;
    pthread_mutex_unlock(&state->lock);
    if (held_size > 0)
        forward(key, held, held_size);
    free(held);
    return forward(key, data, size);
}

typedef struct {
    PyObject_HEAD
    sink_state *state;
} Sink;

static int
Sink_init(Sink *self, PyObject *args, PyObject *kwargs)
{
    static char *names[] = {"forward", "key", NULL};
    unsigned long long forward, key;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "KK", names, &forward, &key))
        return -1;
    if (self->state != NULL) {
        PyErr_SetString(PyExc_RuntimeError, "a Sink is initialised once");
        return -1;
    }
    if (forward == 0) {
        PyErr_SetString(PyExc_ValueError, "forward must be a C callback's address");
        return -1;
    }
    sink_state *state = calloc(1, sizeof(sink_state));
    if (state == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    pthread_mutex_init(&state->lock, NULL);
    state->refs = 1;  /* this object; `lend` adds the stream's */
    state->forward_all = 1;
    state->forward = (forward_fn)(uintptr_t)forward;
    state->key = (void *)(uintptr_t)key;
    self->state = state;
    return 0;
}

static void
Sink_dealloc(Sink *self)
{
    if (self->state != NULL)
        state_release(self->state);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int
ready(Sink *self)
{
    if (self->state == NULL)
        PyErr_SetString(PyExc_RuntimeError, "the Sink was not initialised");
    return self->state != NULL;
}

static PyObject *
Sink_configure(Sink *self, PyObject *args)
{
    Py_ssize_t limit;
    int forward_all;
    if (!ready(self) || !PyArg_ParseTuple(args, "np", &limit, &forward_all))
        return NULL;
    pthread_mutex_lock(&self->state->lock);
    self->state->limit = limit < 0 ? 0 : (size_t)limit;
    self->state->forward_all = forward_all;
    pthread_mutex_unlock(&self->state->lock);
    Py_RETURN_NONE;
}

static PyObject *
Sink_take(Sink *self, PyObject *Py_UNUSED(ignored))
{
    if (!ready(self))
        return NULL;
    sink_state *state = self->state;
    pthread_mutex_lock(&state->lock);
    PyObject *taken = PyBytes_FromStringAndSize((const char *)state->data, (Py_ssize_t)state->size);
    if (taken != NULL)
        state->size = 0;
    pthread_mutex_unlock(&state->lock);
    return taken;
}

static PyObject *
Sink_lend(Sink *self, PyObject *Py_UNUSED(ignored))
{
    if (!ready(self))
        return NULL;
    __atomic_add_fetch(&self->state->refs, 1, __ATOMIC_ACQ_REL);
    return PyLong_FromVoidPtr(self->state);
}

static PyMethodDef Sink_methods[] = {
    {"configure", (PyCFunction)Sink_configure, METH_VARARGS,
     "configure(limit, forward_all): keep up to `limit` bytes, or forward every write"},
    {"take", (PyCFunction)Sink_take, METH_NOARGS, "take() -> bytes kept since the last take"},
    {"lend", (PyCFunction)Sink_lend, METH_NOARGS,
     "lend() -> the state's address, for a stream's `data`: the stream holds it until RELEASE"},
    {NULL}
};

static PyTypeObject SinkType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "wasm_runner.lowlevel._output_sink.Sink",
    .tp_basicsize = sizeof(Sink),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Sink(forward, key): a guest stream's buffer; `forward` is a C callback's address",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Sink_init,
    .tp_dealloc = (destructor)Sink_dealloc,
    .tp_methods = Sink_methods,
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_output_sink", "Guest output kept in C until the host takes it.", -1, NULL,
};

PyMODINIT_FUNC
PyInit__output_sink(void)
{
    if (PyType_Ready(&SinkType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    if (PyModule_AddObjectRef(m, "Sink", (PyObject *)&SinkType) < 0
        || PyModule_AddObject(m, "WRITE", PyLong_FromVoidPtr((void *)state_write)) < 0
        || PyModule_AddObject(m, "RELEASE", PyLong_FromVoidPtr((void *)state_release)) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
