/* openat2(2) for the path sandbox's symlink-free check (SPEC EXE-4, PERF-4a).
 *
 * The same system call as executor/openat2.py makes through ctypes, without ctypes' call
 * layers (about 1 µs of the 2.3 µs a check costs). Built by `make native`; without it the
 * ctypes version runs (tests compare the two).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

/* The symlink-free check: 0 when the absolute path exists with no symlink in any component
 * (openat2 with RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS from AT_FDCWD, O_PATH),
 * otherwise the errno of the call. With `links`, EMLINK when it exists with no symlink but is
 * a regular file with more than one link (another name may be a denied file's: the caller
 * looks at it; one fstat of the descriptor already open, for reads only). */
static PyObject *check(PyObject *arg, int links) {
    PyObject *encoded = NULL;
    if (!PyUnicode_FSConverter(arg, &encoded)) {
        return NULL; /* TypeError, or ValueError for an embedded NUL, as os.fsencode */
    }
    struct open_how how = {0};
    how.flags = O_PATH | O_CLOEXEC;
    how.resolve = RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS;
    long fd;
    int error = 0;
    Py_BEGIN_ALLOW_THREADS
    fd = syscall(SYS_openat2, AT_FDCWD, PyBytes_AS_STRING(encoded), &how, sizeof(how));
    if (fd < 0) {
        error = errno ? errno : -1;
    } else {
        struct stat st;
        if (links && fstat((int)fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_nlink > 1) {
            error = EMLINK;
        }
        close((int)fd);
    }
    Py_END_ALLOW_THREADS
    Py_DECREF(encoded);
    return PyLong_FromLong(error);
}

/* entry_exists(path: str) -> bool: os.access(path, F_OK, effective_ids=True,
 * follow_symlinks=False) (faccessat with AT_EACCESS | AT_SYMLINK_NOFOLLOW: an entry of that
 * name exists, a final symlink not followed), without the keyword parsing and stat result
 * of the os module's call layers; False for a path with an embedded NUL, as
 * os.path.lexists answers. paths.lexists asks this for every ancestor of every write. */
static PyObject *entry_exists(PyObject *self, PyObject *arg) {
    PyObject *encoded = NULL;
    if (!PyUnicode_FSConverter(arg, &encoded)) {
        if (PyErr_ExceptionMatches(PyExc_ValueError)) {
            PyErr_Clear(); /* an embedded NUL: no such file */
            Py_RETURN_FALSE;
        }
        return NULL;
    }
    int result;
    Py_BEGIN_ALLOW_THREADS
    result = faccessat(AT_FDCWD, PyBytes_AS_STRING(encoded), F_OK,
                       AT_EACCESS | AT_SYMLINK_NOFOLLOW);
    Py_END_ALLOW_THREADS
    Py_DECREF(encoded);
    return PyBool_FromLong(result == 0);
}

/* symlink_free_errno(path: str) -> int: the check. */
static PyObject *symlink_free_errno(PyObject *self, PyObject *arg) { return check(arg, 0); }

/* symlink_free_links(path: str) -> int: the check, and EMLINK for a file with links. */
static PyObject *symlink_free_links(PyObject *self, PyObject *arg) { return check(arg, 1); }

static PyMethodDef methods[] = {
    {"symlink_free_errno", symlink_free_errno, METH_O,
     "0 when the absolute path exists with no symlink in any component, else the errno."},
    {"entry_exists", entry_exists, METH_O,
     "Whether an entry of that name exists (a final symlink not followed)."},
    {"symlink_free_links", symlink_free_links, METH_O,
     "symlink_free_errno, and EMLINK for a regular file with more than one link."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_openat2", "openat2(2) for the path sandbox.", -1, methods,
};

PyMODINIT_FUNC PyInit__openat2(void) { return PyModule_Create(&module); }
