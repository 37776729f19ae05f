/* The chunked transfer coding of an HTTP/1.1 response body, decoded in C.
 *
 * Dechunker().feed(data) -> bytes takes the bytes of one socket read that follow the
 * response head and returns the body bytes they carried, one object per read; `done` is
 * true once the last chunk and the trailer section have been read, and `leftover` counts
 * the bytes of that read that came after them. A malformed body sets `error` (why): the
 * read that holds the fault still returns the body bytes before it (a good chunk is not
 * lost for sharing a read with a bad one), and nothing is decoded after it.
 *
 * httptools (llhttp) parses the head of every response and, where this module is missing,
 * the body too; this exists because httptools hands each chunk of a body to Python as its
 * own bytes object through a Python call, which at one chunk per SSE event cost more than
 * classifying the event. The grammar and its strictness follow llhttp's (RFC 9112 7.1):
 * hex sizes of at most 64 bits, CRLF everywhere, extensions `;name[=token|"quoted"]`
 * without spaces (and llhttp's few liberties: empty names and values, though not a ';' right
 * before the CR, and a token running into a quoted string), trailer fields `token:value`. The tests check it against httptools on the same
 * bytes, valid and corrupted, split at any points.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

typedef enum {
    SIZE_FIRST,   /* the first hex digit of a chunk size */
    SIZE,         /* more hex digits, ';' or CR */
    EXT_NAME_FIRST,
    EXT_NAME,     /* token chars, '=', ';' or CR */
    EXT_VALUE_FIRST,
    EXT_VALUE,    /* token chars, ';' or CR */
    EXT_QUOTED,   /* inside a quoted value */
    EXT_ESCAPE,   /* after a backslash in it */
    EXT_QUOTED_END, /* after its closing quote: ';' or CR */
    SIZE_LF,      /* the LF after the size line */
    DATA,         /* `remaining` bytes of chunk data */
    DATA_CR,
    DATA_LF,
    TRAILER_FIRST, /* the start of a trailer line: CR (the end) or a field name */
    TRAILER_NAME, /* token chars or ':' */
    TRAILER_VALUE, /* anything but CR, LF and other controls, then CR */
    TRAILER_LF,
    END_LF,       /* the LF of the empty line that ends the message */
    DONE,
} State;

typedef struct {
    PyObject_HEAD
    State state;
    uint64_t size;
    uint64_t remaining;
    Py_ssize_t leftover;
    const char *error; /* why the body is malformed (a static string), or NULL */
} Dechunker;

static int
is_token(unsigned char c)
{
    if ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) {
        return 1;
    }
    return c != 0 && strchr("!#$%&'*+-.^_`|~", c) != NULL;
}

/* A control character, which no quoted extension value or trailer value may hold (HTAB
 * aside). */
static int
is_ctl(unsigned char c)
{
    return (c < 0x20 && c != '\t') || c == 0x7f;
}

static int
hex_value(unsigned char c)
{
    if (c >= '0' && c <= '9') {
        return c - '0';
    }
    if (c >= 'a' && c <= 'f') {
        return c - 'a' + 10;
    }
    if (c >= 'A' && c <= 'F') {
        return c - 'A' + 10;
    }
    return -1;
}

/* After the LF that ends a size line: the chunk's data, or the trailers after the last. */
static void
after_size_line(Dechunker *self)
{
    if (self->size == 0) {
        self->state = TRAILER_FIRST;
    }
    else {
        self->remaining = self->size;
        self->state = DATA;
    }
}

/* Decode [p, end) into `out` (room for end - p bytes); the bytes written go to *written
 * (on a fault too: the body bytes before it). NULL, or the reason the body is malformed. */
#define FAIL(reason)                                                                       \
    do {                                                                                 \
        *written = w - out;                                                              \
        return (reason);                                                                 \
    } while (0)

static const char *
decode(Dechunker *self, const unsigned char *p, const unsigned char *end, char *out,
       Py_ssize_t *written)
{
    char *w = out;
    while (p < end) {
        const unsigned char c = *p;
        switch (self->state) {
        case DATA: {
            Py_ssize_t take = end - p;
            if ((uint64_t)take > self->remaining) {
                take = (Py_ssize_t)self->remaining;
            }
            memcpy(w, p, (size_t)take);
            w += take;
            p += take;
            self->remaining -= (uint64_t)take;
            if (self->remaining == 0) {
                self->state = DATA_CR;
            }
            continue;
        }
        case SIZE_FIRST:
        case SIZE: {
            int v = hex_value(c);
            if (v >= 0) {
                if (self->size > (UINT64_MAX >> 4)) {
                    FAIL("chunk size overflow");
                }
                self->size = (self->size << 4) | (uint64_t)v;
                self->state = SIZE;
            }
            else if (self->state == SIZE && c == ';') {
                self->state = EXT_NAME_FIRST;
            }
            else if (self->state == SIZE && c == '\r') {
                self->state = SIZE_LF;
            }
            else {
                FAIL("invalid character in chunk size");
            }
            break;
        }
        case EXT_NAME_FIRST: /* llhttp takes empty names, but not a ';' just before the CR */
        case EXT_NAME:
            if (is_token(c)) {
                self->state = EXT_NAME;
            }
            else if (c == '=') {
                self->state = EXT_VALUE_FIRST;
            }
            else if (c == ';') {
                self->state = EXT_NAME_FIRST;
            }
            else if (self->state == EXT_NAME && c == '\r') {
                self->state = SIZE_LF;
            }
            else {
                FAIL("invalid character in chunk extension name");
            }
            break;
        case EXT_VALUE_FIRST: /* values may be empty too */
            if (c == '"') {
                self->state = EXT_QUOTED;
            }
            else if (is_token(c)) {
                self->state = EXT_VALUE;
            }
            else if (c == ';') {
                self->state = EXT_NAME_FIRST;
            }
            else if (c == '\r') {
                self->state = SIZE_LF;
            }
            else {
                FAIL("invalid character in chunk extension value");
            }
            break;
        case EXT_VALUE:
            if (c == ';') {
                self->state = EXT_NAME_FIRST;
            }
            else if (c == '"') { /* a token may run into a quoted string, as llhttp reads it */
                self->state = EXT_QUOTED;
            }
            else if (c == '\r') {
                self->state = SIZE_LF;
            }
            else if (!is_token(c)) {
                FAIL("invalid character in chunk extension value");
            }
            break;
        case EXT_QUOTED:
            if (c == '"') {
                self->state = EXT_QUOTED_END;
            }
            else if (c == '\\') {
                self->state = EXT_ESCAPE;
            }
            else if (is_ctl(c)) {
                FAIL("invalid character in chunk extension quoted value");
            }
            break;
        case EXT_ESCAPE:
            if (is_ctl(c)) {
                FAIL("invalid character in chunk extension quoted value");
            }
            self->state = EXT_QUOTED;
            break;
        case EXT_QUOTED_END:
            if (c == ';') {
                self->state = EXT_NAME_FIRST;
            }
            else if (c == '\r') {
                self->state = SIZE_LF;
            }
            else {
                FAIL("invalid character after a chunk extension value");
            }
            break;
        case SIZE_LF:
            if (c != '\n') {
                FAIL("missing LF after chunk size");
            }
            after_size_line(self);
            break;
        case DATA_CR:
            if (c != '\r') {
                FAIL("missing CR after chunk data");
            }
            self->state = DATA_LF;
            break;
        case DATA_LF:
            if (c != '\n') {
                FAIL("missing LF after chunk data");
            }
            self->size = 0;
            self->state = SIZE_FIRST;
            break;
        case TRAILER_FIRST:
            if (c == '\r') {
                self->state = END_LF;
            }
            else if (is_token(c)) {
                self->state = TRAILER_NAME;
            }
            else {
                FAIL("invalid character in trailer field name");
            }
            break;
        case TRAILER_NAME:
            if (c == ':') {
                self->state = TRAILER_VALUE;
            }
            else if (!is_token(c)) {
                FAIL("invalid character in trailer field name");
            }
            break;
        case TRAILER_VALUE:
            if (c == '\r') {
                self->state = TRAILER_LF;
            }
            else if (is_ctl(c)) {
                FAIL("invalid character in trailer field value");
            }
            break;
        case TRAILER_LF:
            if (c != '\n') {
                FAIL("missing LF after trailer field");
            }
            self->state = TRAILER_FIRST;
            break;
        case END_LF:
            if (c != '\n') {
                FAIL("missing LF at the end of the body");
            }
            self->state = DONE;
            break;
        case DONE:
            self->leftover = end - p;
            *written = w - out;
            return NULL;
        }
        p++;
    }
    *written = w - out;
    return NULL;
}

#undef FAIL

static PyObject *
Dechunker_feed(Dechunker *self, PyObject *data)
{
    if (!PyBytes_Check(data)) {
        PyErr_SetString(PyExc_TypeError, "feed(data: bytes)");
        return NULL;
    }
    const Py_ssize_t n = PyBytes_GET_SIZE(data);
    const unsigned char *p = (const unsigned char *)PyBytes_AS_STRING(data);
    if (self->state == DONE || self->error != NULL) {
        if (self->state == DONE) {
            self->leftover += n;
        }
        return PyBytes_FromStringAndSize(NULL, 0);
    }
    PyObject *out = PyBytes_FromStringAndSize(NULL, n);
    if (out == NULL) {
        return NULL;
    }
    Py_ssize_t written = 0;
    /* On a fault, decode() has written the body bytes before it: they are returned. */
    self->error = decode(self, p, p + n, PyBytes_AS_STRING(out), &written);
    if (written != n && _PyBytes_Resize(&out, written) < 0) {
        return NULL;
    }
    return out;
}

static PyObject *
Dechunker_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    if (PyTuple_GET_SIZE(args) > 0 || (kwargs != NULL && PyDict_GET_SIZE(kwargs) > 0)) {
        PyErr_SetString(PyExc_TypeError, "Dechunker() takes no arguments");
        return NULL;
    }
    Dechunker *self = (Dechunker *)type->tp_alloc(type, 0);
    if (self != NULL) {
        self->state = SIZE_FIRST;
    }
    return (PyObject *)self;
}

static PyObject *
Dechunker_done(Dechunker *self, void *closure)
{
    (void)closure;
    return PyBool_FromLong(self->state == DONE);
}

static PyObject *
Dechunker_error(Dechunker *self, void *closure)
{
    (void)closure;
    if (self->error == NULL) {
        Py_RETURN_NONE;
    }
    return PyUnicode_FromString(self->error);
}

static PyObject *
Dechunker_leftover(Dechunker *self, void *closure)
{
    (void)closure;
    return PyLong_FromSsize_t(self->leftover);
}

static PyMethodDef Dechunker_methods[] = {
    {"feed", (PyCFunction)Dechunker_feed, METH_O,
     "feed(data) -> bytes: the body bytes of one read (up to a fault: see error)."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Dechunker_getset[] = {
    {"done", (getter)Dechunker_done, NULL, "The last chunk and the trailers have been read.",
     NULL},
    {"error", (getter)Dechunker_error, NULL,
     "Why the body is malformed (None while it is not): nothing after the fault is decoded.",
     NULL},
    {"leftover", (getter)Dechunker_leftover, NULL,
     "Bytes fed after the end of the body (another response's, or garbage).", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject DechunkerType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "loadgen.http._chunked.Dechunker",
    .tp_basicsize = sizeof(Dechunker),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "The decoder of one chunked response body.",
    .tp_new = Dechunker_new,
    .tp_methods = Dechunker_methods,
    .tp_getset = Dechunker_getset,
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "_chunked", "The chunked transfer coding, decoded in C.", 0, NULL,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC
PyInit__chunked(void)
{
    if (PyType_Ready(&DechunkerType) < 0) {
        return NULL;
    }
    PyObject *module = PyModule_Create(&module_def);
    if (module == NULL) {
        return NULL;
    }
    if (PyModule_AddObjectRef(module, "Dechunker", (PyObject *)&DechunkerType) < 0) {
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
