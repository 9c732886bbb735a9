/* copy_pages(dst, dst_pages, src, src_pages, page_size): dst page dst_pages[i] = src page
 * src_pages[i], for every i.
 *
 * A memory reset restores a few hundred scattered pages. numpy's `dst[a] = src[b]` does it in
 * two copies (a gather into a temporary, then a scatter), and a Python loop of one memmove per
 * run of pages costs more in calls than the copy itself; this copies each run of consecutive
 * pages once, with the GIL released. Every page number is checked against both buffers. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

static int
check_pages(const Py_buffer *pages, const char *name)
{
    if (pages->len % (Py_ssize_t)sizeof(int64_t) != 0) {
        PyErr_Format(PyExc_ValueError, "%s must be a buffer of int64 page numbers", name);
        return -1;
    }
    return 0;
}

static PyObject *
copy_pages(PyObject *module, PyObject *args)
{
    Py_buffer dst, dst_pages, src, src_pages;
    Py_ssize_t page;
    if (!PyArg_ParseTuple(args, "w*y*y*y*n", &dst, &dst_pages, &src, &src_pages, &page))
        return NULL;
    PyObject *result = NULL;
    if (check_pages(&dst_pages, "dst_pages") < 0 || check_pages(&src_pages, "src_pages") < 0)
        goto done;
    if (dst_pages.len != src_pages.len) {
        PyErr_SetString(PyExc_ValueError, "dst_pages and src_pages differ in length");
        goto done;
    }
    if (page <= 0) {
        PyErr_SetString(PyExc_ValueError, "page_size must be positive");
        goto done;
    }
    const int64_t *to = dst_pages.buf, *from = src_pages.buf;
    Py_ssize_t n = dst_pages.len / (Py_ssize_t)sizeof(int64_t);
    int64_t dst_count = dst.len / page, src_count = src.len / page;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (to[i] < 0 || to[i] >= dst_count || from[i] < 0 || from[i] >= src_count) {
            PyErr_Format(PyExc_IndexError, "page %zd: %lld -> %lld is out of range", i,
                         (long long)from[i], (long long)to[i]);
            goto done;
        }
    }
    char *d = dst.buf;
    const char *s = src.buf;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n;) {
        Py_ssize_t j = i + 1;
        while (j < n && to[j] == to[j - 1] + 1 && from[j] == from[j - 1] + 1)
            j++;
        memcpy(d + to[i] * page, s + from[i] * page, (size_t)((j - i) * page));
        i = j;
    }
    Py_END_ALLOW_THREADS
    result = Py_NewRef(Py_None);
done:
    PyBuffer_Release(&dst);
    PyBuffer_Release(&dst_pages);
    PyBuffer_Release(&src);
    PyBuffer_Release(&src_pages);
    return result;
}

static PyMethodDef methods[] = {
    {"copy_pages", copy_pages, METH_VARARGS,
     "copy_pages(dst, dst_pages, src, src_pages, page_size): dst page dst_pages[i] = src page src_pages[i]."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_page_copy", "One-copy scatter of memory pages (see copy_pages).", -1, methods,
};

PyMODINIT_FUNC
PyInit__page_copy(void)
{
    return PyModule_Create(&module);
}
