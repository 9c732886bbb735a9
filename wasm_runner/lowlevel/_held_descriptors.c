/* held_removed(devices, prefixes): whether this process holds a descriptor open on a removed
 * file or directory (no links left) on one of `devices` (st_dev numbers) whose path, as
 * /proc/self/fd shows it ("<path> (deleted)"), starts with one of `prefixes` (bytes).
 *
 * It runs before every reset of a reused instance. In Python, the listing and an fstat per
 * descriptor cost several times this (an object, an exception or a GIL release each); here
 * the whole scan runs with the GIL released, and a path is built by the kernel (several
 * microseconds) only for a removed entry on those devices. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#define MAX_ENTRIES 8

struct linux_dirent64 {
    unsigned long long d_ino;
    long long d_off;
    unsigned short d_reclen;
    unsigned char d_type;
    char d_name[];
};

/* 1: found, 0: none, -1: errno set */
static int
scan(const dev_t *devices, int ndevices, const char *const *prefixes, const size_t *lengths, int nprefixes)
{
    int dir = open("/proc/self/fd", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dir < 0)
        return -1;
    char buffer[4096], path[64], target[4096];
    int found = 0;
    for (;;) {
        long n = syscall(SYS_getdents64, dir, buffer, sizeof buffer);
        if (n < 0) {
            found = -1;
            break;
        }
        if (n == 0)
            break;
        for (long offset = 0; offset < n && !found;) {
            struct linux_dirent64 *entry = (struct linux_dirent64 *)(buffer + offset);
            offset += entry->d_reclen;
            char *end;
            long fd = strtol(entry->d_name, &end, 10);
            struct stat st;
            if (end == entry->d_name || *end != '\0' || fd == dir || fstat((int)fd, &st) != 0 || st.st_nlink != 0)
                continue;
            int on_device = 0;
            for (int i = 0; i < ndevices; i++)
                on_device |= st.st_dev == devices[i];
            if (!on_device)
                continue;
            snprintf(path, sizeof path, "/proc/self/fd/%ld", fd);
            ssize_t length = readlink(path, target, sizeof target);
            for (int i = 0; i < nprefixes && length > 0; i++)
                if ((size_t)length >= lengths[i] && memcmp(target, prefixes[i], lengths[i]) == 0)
                    found = 1;
        }
        if (found)
            break;
    }
    close(dir);
    return found;
}

static PyObject *
held_removed(PyObject *module, PyObject *args)
{
    PyObject *device_list, *prefix_list;
    if (!PyArg_ParseTuple(args, "O!O!", &PyTuple_Type, &device_list, &PyTuple_Type, &prefix_list))
        return NULL;
    Py_ssize_t ndevices = PyTuple_GET_SIZE(device_list), nprefixes = PyTuple_GET_SIZE(prefix_list);
    if (ndevices > MAX_ENTRIES || nprefixes > MAX_ENTRIES) {
        PyErr_SetString(PyExc_ValueError, "at most 8 devices and 8 prefixes");
        return NULL;
    }
    dev_t devices[MAX_ENTRIES];
    const char *prefixes[MAX_ENTRIES];
    size_t lengths[MAX_ENTRIES];
    for (Py_ssize_t i = 0; i < ndevices; i++) {
        unsigned long long device = PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(device_list, i));
        if (PyErr_Occurred())
            return NULL;
        devices[i] = (dev_t)device;
    }
    for (Py_ssize_t i = 0; i < nprefixes; i++) {
        PyObject *prefix = PyTuple_GET_ITEM(prefix_list, i);  /* kept alive by the tuple */
        if (!PyBytes_Check(prefix)) {
            PyErr_SetString(PyExc_TypeError, "prefixes must be bytes");
            return NULL;
        }
        prefixes[i] = PyBytes_AS_STRING(prefix);
        lengths[i] = (size_t)PyBytes_GET_SIZE(prefix);
    }
    int found;
    Py_BEGIN_ALLOW_THREADS
    found = scan(devices, (int)ndevices, prefixes, lengths, (int)nprefixes);
    Py_END_ALLOW_THREADS
    if (found < 0)
        return PyErr_SetFromErrno(PyExc_OSError);
    return PyBool_FromLong(found);
}

static PyMethodDef methods[] = {
    {"held_removed", held_removed, METH_VARARGS,
     "held_removed(devices, prefixes) -> whether a descriptor of the process is open on a removed entry there"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_held_descriptors", NULL, -1, methods};

PyMODINIT_FUNC
PyInit__held_descriptors(void)
{
    return PyModule_Create(&module);
}
