/* The plain-content scan of loadgen.sse_bulk, in C: one pass over a read's SSE text.
 *
 * scan_plain(text, pos, offset, content, tokens, last) walks the events of `text` (whole
 * CR-free blocks separated by "\n\n", as SSEDecoder.feed_raw returns them) from offset
 * `pos`, for as long as each is a one-line `data: ` event that
 * loadgen.protocol.plain_content_tokens calls plain content:
 *
 *   - it holds "finish_reason":null, and
 *   - it holds "delta":{"content":" or "text":" not followed by a quote, and
 *   - its cumulative usage is the digits after the first "completion_tokens": followed by
 *     a digit (none: the chunk carries no usage).
 *
 * For each, as StreamState.add does: `offset` (the read's arrival, µs after the send) is
 * appended to `content`, and, unless `tokens` is None (the counts are already unknown),
 * the usage value minus `last` to `tokens`, `last` becoming the value. A chunk without
 * usage makes the counts unknown and stops that bookkeeping.
 *
 * Returns (count, stop, last, known): the events taken, the offset of the first block not
 * taken (len(text) when all were), the last usage value, and False when a chunk without
 * usage was met. Anything else stops the walk: [DONE], a multi-line or non-data block, an
 * empty one, any other chunk, or a usage value longer than 18 digits (the Python path
 * reads those exactly). The caller hands that block to the per-event path and calls again
 * after it.
 *
 * Every key is found by memchr on a byte that is rare in compact JSON, then memcmp: the
 * same first occurrence a substring search finds, at the speed of the C library's memchr.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>

typedef struct {
    const char *bytes;
    Py_ssize_t len;
    Py_ssize_t anchor; /* a byte of the key that is rare in compact JSON */
} Key;

static const Key FINISH = {"\"finish_reason\":null", 20, 7};     /* '_' */
static const Key CHAT = {"\"delta\":{\"content\":\"", 20, 8};    /* '{' */
static const Key TEXT = {"\"text\":\"", 8, 3};                    /* 'x' */
static const Key TOKENS = {"\"completion_tokens\":", 20, 11};    /* '_' */

#define MAX_DIGITS 18 /* below 2**60: a C long long holds it */
#define LAST_LIMIT (1LL << 62) /* so that value - last fits too */

/* The first occurrence of `key` starting in [from, end) and ending by `end`, or NULL. */
static const char *
find_key(const char *from, const char *end, const Key *key)
{
    const char *q = from + key->anchor;
    const char c = key->bytes[key->anchor];
    while (q < end) {
        q = memchr(q, c, (size_t)(end - q));
        if (q == NULL) {
            return NULL;
        }
        const char *start = q - key->anchor;
        if (end - start >= key->len && memcmp(start, key->bytes, (size_t)key->len) == 0) {
            return start;
        }
        q++;
    }
    return NULL;
}

/* Whether some occurrence of `key` in [p, end) is not followed by a quote. */
static int
has_content(const char *p, const char *end, const Key *key)
{
    for (;;) {
        const char *hit = find_key(p, end, key);
        if (hit == NULL) {
            return 0;
        }
        const char *after = hit + key->len;
        if (after >= end || *after != '"') {
            return 1;
        }
        p = hit + 1;
    }
}

/* The usage value of [p, end): 1 and *value set, 0 for none, -1 when too long. */
static int
usage_value(const char *p, const char *end, long long *value)
{
    for (;;) {
        const char *hit = find_key(p, end, &TOKENS);
        if (hit == NULL) {
            return 0;
        }
        const char *d = hit + TOKENS.len;
        if (d < end && *d >= '0' && *d <= '9') {
            long long v = 0;
            int n = 0;
            while (d < end && *d >= '0' && *d <= '9') {
                if (++n > MAX_DIGITS) {
                    return -1;
                }
                v = v * 10 + (*d - '0');
                d++;
            }
            *value = v;
            return 1;
        }
        p = hit + 1;
    }
}

static PyObject *
scan_plain(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 6 || !PyBytes_Check(args[0]) || !PyList_Check(args[3])
        || (args[4] != Py_None && !PyList_Check(args[4]))) {
        PyErr_SetString(PyExc_TypeError,
                        "scan_plain(text: bytes, pos: int, offset: int, content: list, "
                        "tokens: list | None, last: int)");
        return NULL;
    }
    Py_ssize_t pos = PyLong_AsSsize_t(args[1]);
    if (pos == -1 && PyErr_Occurred()) {
        return NULL;
    }
    int overflow = 0;
    long long last = PyLong_AsLongLongAndOverflow(args[5], &overflow);
    if (last == -1 && PyErr_Occurred()) {
        return NULL;
    }
    if (overflow || last > LAST_LIMIT || last < -LAST_LIMIT) {
        /* value - last could overflow: take nothing, the per-event path reads it exactly */
        return Py_BuildValue("nnOO", (Py_ssize_t)0, pos, args[5], Py_True);
    }
    const char *s = PyBytes_AS_STRING(args[0]);
    const Py_ssize_t n = PyBytes_GET_SIZE(args[0]);
    if (pos < 0 || pos > n) {
        PyErr_SetString(PyExc_ValueError, "pos out of range");
        return NULL;
    }
    PyObject *offset = args[2];
    PyObject *content = args[3];
    PyObject *tokens = args[4] == Py_None ? NULL : args[4];
    int known = 1;
    Py_ssize_t count = 0;
    const char *end = s + n;
    while (pos < n) {
        const char *block = s + pos;
        const char *nl = memchr(block, '\n', (size_t)(end - block));
        const char *stop = nl != NULL ? nl : end;
        if (nl != NULL && (nl + 1 >= end || nl[1] != '\n')) {
            break; /* a multi-line block (or a lone trailing LF) */
        }
        if (stop - block < 6 || memcmp(block, "data: ", 6) != 0) {
            break;
        }
        const char *payload = block + 6;
        if (find_key(payload, stop, &FINISH) == NULL) {
            break; /* [DONE] and every finished chunk end up here */
        }
        if (!has_content(payload, stop, &CHAT) && !has_content(payload, stop, &TEXT)) {
            break;
        }
        if (tokens != NULL && known) {
            long long value = 0;
            int got = usage_value(payload, stop, &value);
            if (got < 0) {
                break;
            }
            if (got == 0) {
                known = 0; /* tokens per chunk are unknown from here on */
            }
            else {
                PyObject *diff = PyLong_FromLongLong(value - last);
                if (diff == NULL || PyList_Append(tokens, diff) < 0) {
                    Py_XDECREF(diff);
                    return NULL;
                }
                Py_DECREF(diff);
                last = value;
            }
        }
        if (PyList_Append(content, offset) < 0) {
            return NULL;
        }
        count++;
        pos = nl != NULL ? (nl - s) + 2 : n;
    }
    return Py_BuildValue("nnLO", count, pos, last, known ? Py_True : Py_False);
}

static PyMethodDef methods[] = {
    {"scan_plain", (PyCFunction)(void (*)(void))scan_plain, METH_FASTCALL,
     "scan_plain(text, pos, offset, content, tokens, last) -> (count, stop, last, known): "
     "add the run of plain content events of text from pos."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "_sse_scan", "The plain-content scan of loadgen.sse_bulk, in C.",
    0, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC
PyInit__sse_scan(void)
{
    return PyModule_Create(&module_def);
}
