/* The per-read event walk of loadgen.stream.feed, in C: one call per socket read.
 *
 * scan_read(state, ts, text, add_block) adds the events of `text` (whole CR-free blocks
 * separated by "\n\n", as SSEDecoder.feed_raw returns them), which arrived at `ts`, to
 * `state` (a loadgen.stream.state.StreamState), exactly as StreamState.add would one by one.
 * It is one of the feed's two implementations; the other, used where this module is not
 * built, is that reference itself, and the tests run every case on both.
 *
 * scan_feed(decoder, state, add_block, ts, data) is one socket read: framed on the
 * decoder's own state as SSEDecoder._blocks frames it, and what it completed walked as
 * scan_read walks it. Linear in the bytes read: a read's line ends are normalized once,
 * only the read is searched for a blank line (the pending event is not rescanned), the
 * pending event grows by amortized steps in a bytearray and is copied once when it
 * completes. An event beyond the decoder's limit refuses the stream (decoder._refuse()),
 * and scan_feed answers True from then on.
 *
 * Runs of one-line `data: ` events that loadgen.openai.chunks.plain_content_tokens calls plain
 * content are taken here, without Python:
 *
 *   - it holds "finish_reason":null, and
 *   - it holds "delta":{"content":" or "text":" not followed by a quote, and
 *   - its cumulative usage is the digits after the first "completion_tokens": followed by
 *     a digit (none: the chunk carries no usage).
 *
 * For each, as StreamState.add does: the read's arrival, (ts - sent_ns) // 1000 µs after
 * the send, is appended to state.content, and, while state.tokens_known, the usage value
 * minus state.last_completion to state.tokens, last_completion becoming the value; a chunk
 * without usage clears tokens_known. The first such event sets state.first_token.
 *
 * Every other block: `data: [DONE]` sets state.done; another one-line `data: ` event the
 * walk saw is not plain content is decoded by orjson and classified here as
 * StreamState.add_decoded would (a tool-call chunk, a non-empty delta.tool_calls, is
 * content that also counts in state.tool_calls and may set state.first_tool_call;
 * errors and server timings by that method itself); other
 * one-line events go to state.add(ts, payload), anything else (multi-line events,
 * comments, other fields) to add_block(state, ts, block). So do plain events whose usage
 * value is longer than 18 digits or whose predecessor's is (the Python path reads those
 * exactly). The state is read again after each of those calls.
 *
 * Every key is found by memchr on a byte that is rare in compact JSON, then compared in
 * place: the occurrences a substring search finds, at the speed of the C library's
 * memchr. The finish and usage keys share theirs ('_'), so one walk over a line's
 * underscores serves both (a byte-by-byte walk over each line, comparing keys at every
 * quote, took 2.4 times as long).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>

/* The keys plain_content_tokens looks for. Compared with constant lengths, so that the
 * compiler expands each comparison in place instead of calling the library. */
#define FINISH "\"finish_reason\":null"
#define CHAT "\"delta\":{\"content\":\""
#define TEXT "\"text\":\""
#define TOKENS "\"completion_tokens\":"
#define LEN(key) ((Py_ssize_t)sizeof(key) - 1)
/* Whether `key` starts at `start`, within [p, end). */
#define KEY_AT(start, p, end, key)                                                       \
    ((start) >= (p) && (end) - (start) >= LEN(key) && memcmp((start), key, LEN(key)) == 0)

#define MAX_DIGITS 18 /* below 2**60: a C long long holds it */
#define LAST_LIMIT (1LL << 62) /* so that value - last fits too */

/* What plain_content_tokens looks for in one event's payload. */
typedef struct {
    int finish;  /* "finish_reason":null occurs */
    int content; /* "delta":{"content":" or "text":" occurs, not followed by a quote */
    int usage;   /* 1: the first "completion_tokens": followed by a digit has `value`;
                    0: there is none; -1: its digits are too many to read here */
    long long value;
} Line;

/* Whether an occurrence of a content key, found by memchr on its byte `anchor` (rare in
 * compact JSON), is not followed by a quote. */
static int
has_content(const char *p, const char *end, int chat)
{
    const Py_ssize_t anchor = chat ? 8 : 3; /* '{' of CHAT, 'x' of TEXT */
    const char c = chat ? '{' : 'x';
    for (const char *q = p + anchor; q < end; q++) {
        q = memchr(q, c, (size_t)(end - q));
        if (q == NULL) {
            return 0;
        }
        const char *start = q - anchor;
        const Py_ssize_t len = chat ? LEN(CHAT) : LEN(TEXT);
        if (chat ? KEY_AT(start, p, end, CHAT) : KEY_AT(start, p, end, TEXT)) {
            if (start + len >= end || start[len] != '"') {
                return 1;
            }
        }
    }
    return 0;
}

/* The event payload [p, end), read as plain_content_tokens' substring searches would:
 * the finish and usage keys share their rare byte ('_'), so one walk over the
 * underscores finds both; the content keys have their own. */
static void
scan_line(const char *p, const char *end, Line *line)
{
    line->finish = line->content = line->usage = 0;
    line->value = 0;
    int usage_done = 0;
    for (const char *q = p; q < end && !(line->finish && usage_done); q++) {
        q = memchr(q, '_', (size_t)(end - q));
        if (q == NULL) {
            break;
        }
        if (!line->finish && KEY_AT(q - 7, p, end, FINISH)) {
            line->finish = 1;
        }
        if (!usage_done && KEY_AT(q - 11, p, end, TOKENS)) {
            const char *d = q - 11 + LEN(TOKENS);
            int n = 0;
            long long v = 0;
            while (d < end && *d >= '0' && *d <= '9') {
                if (++n > MAX_DIGITS) {
                    break;
                }
                v = v * 10 + (*d - '0');
                d++;
            }
            if (n > MAX_DIGITS) {
                line->usage = -1;
                usage_done = 1;
            }
            else if (n > 0) {
                line->usage = 1;
                line->value = v;
                usage_done = 1;
            }
        }
    }
    if (line->finish) {
        line->content = has_content(p, end, 1) || has_content(p, end, 0);
    }
}

/* The run of plain content events of `s` from `*pos` (whole blocks up to `end`), as
 * StreamState.add would add them: `offset` appended to `content` for each, and, while
 * `tokens` is not NULL, the usage value minus `*last` to `tokens` (`*last` becoming the
 * value; `*known` cleared by a chunk without usage, which also stops that bookkeeping).
 * Returns the number of events taken, or -1 with an exception set; `*pos` is left at the
 * first block not taken, and `*other` is set when that block is a one-line `data: ` event
 * that plain_content_tokens rejects (no unfinished reason or no non-empty content). */
static Py_ssize_t
walk_plain(const char *s, const char *end, Py_ssize_t *pos, PyObject *offset, PyObject *content,
           PyObject *tokens, long long *last, int *known, int *other)
{
    *other = 0;
    Py_ssize_t count = 0;
    const Py_ssize_t n = end - s;
    while (*pos < n) {
        const char *block = s + *pos;
        const char *nl = memchr(block, '\n', (size_t)(end - block));
        const char *stop = nl != NULL ? nl : end;
        if (nl != NULL && (nl + 1 >= end || nl[1] != '\n')) {
            break; /* a multi-line block (or a lone trailing LF) */
        }
        if (stop - block < 6 || memcmp(block, "data: ", 6) != 0) {
            break;
        }
        Line line;
        scan_line(block + 6, stop, &line);
        if (!line.finish || !line.content) {
            *other = 1; /* not plain content: [DONE], finished chunks, role, usage... */
            break;
        }
        if (tokens != NULL && *known) {
            if (line.usage < 0) {
                break;
            }
            if (line.usage == 0) {
                *known = 0; /* tokens per chunk are unknown from here on */
            }
            else {
                PyObject *diff = PyLong_FromLongLong(line.value - *last);
                if (diff == NULL || PyList_Append(tokens, diff) < 0) {
                    Py_XDECREF(diff);
                    return -1;
                }
                Py_DECREF(diff);
                *last = line.value;
            }
        }
        if (PyList_Append(content, offset) < 0) {
            return -1;
        }
        count++;
        *pos = nl != NULL ? (nl - s) + 2 : n;
    }
    return count;
}

/* The Python names the walk uses, interned once, in three groups so that the tests can
 * check each against its side (tests/loadgen/test_sse_scan_names.py): a name is only ever
 * used through its group, and the same word in two groups (`content`, `reasoning`) is
 * interned in each. */

/* Slots of the StreamState (loadgen/stream/state.py) the walk reads and writes, and the
 * methods it calls (`add_object` is `_add_decoded`, which takes a decoded object). */
static struct {
    PyObject *add, *add_decoded, *add_object, *content, *done, *error, *finish,
        *first_reasoning, *first_token, *first_tool_call, *last_completion, *reasoning,
        *sent_ns, *tokens, *tokens_known, *tool_calls, *usage_raw;
} state_attr;

/* Of the SSEDecoder (loadgen/stream/sse.py): its framing state, and the method that
 * refuses a stream. */
static struct {
    PyObject *cr, *error, *limit, *pending, *refuse;
} decoder_attr;

/* Keys of a decoded chunk, as loadgen.openai.chunks.chunk_kind and
 * StreamState._add_decoded read them. */
static struct {
    PyObject *choices, *completion_tokens, *content, *delta, *error, *finish_reason, *metrics,
        *reasoning, *reasoning_content, *text, *timings, *tool_calls, *usage;
} key;

static struct {
    PyObject *empty, *thousand, *one; /* b"", 1000 and 1 */
    PyObject *loads;            /* orjson.loads */
} consts;

/* The state's bookkeeping that the walk reads, fetched again after any Python call. */
typedef struct {
    PyObject *tokens; /* NULL when the counts are unknown */
    long long last;
    int usable; /* 0 when `last` is beyond what the walk computes with exactly */
} Book;

static int
read_book(PyObject *state, Book *book)
{
    Py_CLEAR(book->tokens);
    PyObject *known = PyObject_GetAttr(state, state_attr.tokens_known);
    if (known == NULL) {
        return -1;
    }
    int is_known = PyObject_IsTrue(known);
    Py_DECREF(known);
    if (is_known < 0) {
        return -1;
    }
    if (is_known) {
        book->tokens = PyObject_GetAttr(state, state_attr.tokens);
        if (book->tokens == NULL) {
            return -1;
        }
        if (!PyList_Check(book->tokens)) {
            PyErr_SetString(PyExc_TypeError, "state.tokens must be a list");
            return -1;
        }
    }
    PyObject *last = PyObject_GetAttr(state, state_attr.last_completion);
    if (last == NULL) {
        return -1;
    }
    int overflow = 0;
    book->last = PyLong_AsLongLongAndOverflow(last, &overflow);
    Py_DECREF(last);
    if (book->last == -1 && PyErr_Occurred()) {
        return -1;
    }
    /* value - last could overflow: then the per-event path takes every event */
    book->usable = !overflow && book->last <= LAST_LIMIT && book->last >= -LAST_LIMIT;
    return 0;
}

/* state.attr, if it is None, becomes ts. */
static int
set_if_none(PyObject *state, PyObject *attr, PyObject *ts)
{
    PyObject *now = PyObject_GetAttr(state, attr);
    if (now == NULL) {
        return -1;
    }
    int unset = now == Py_None;
    Py_DECREF(now);
    return unset ? PyObject_SetAttr(state, attr, ts) : 0;
}

/* After a run of `count` events: the first token's stamp, the last usage value and
 * whether the counts are still known, as StreamState.add leaves them. */
static int
write_book(PyObject *state, PyObject *ts, Book *book, int known)
{
    if (set_if_none(state, state_attr.first_token, ts) < 0) {
        return -1;
    }
    PyObject *last = PyLong_FromLongLong(book->last);
    if (last == NULL) {
        return -1;
    }
    int rc = PyObject_SetAttr(state, state_attr.last_completion, last);
    Py_DECREF(last);
    if (rc < 0) {
        return -1;
    }
    if (!known) {
        Py_CLEAR(book->tokens);
        return PyObject_SetAttr(state, state_attr.tokens_known, Py_False);
    }
    return 0;
}

/* A borrowed value of `dict` (NULL when missing), or -1 through *failed. */
static PyObject *
item(PyObject *dict, PyObject *key, int *failed)
{
    PyObject *value = PyDict_GetItemWithError(dict, key);
    if (value == NULL && PyErr_Occurred()) {
        *failed = 1;
    }
    return value;
}

/* Whether a JSON value is truthy (JSON values' truth cannot fail; NULL is missing). */
static int
truthy(PyObject *value)
{
    return value != NULL && value != Py_None && PyObject_IsTrue(value) == 1;
}

/* Append `value` to the list state.attr. */
static int
append_to(PyObject *state, PyObject *attr, PyObject *value)
{
    PyObject *list = PyObject_GetAttr(state, attr);
    if (list == NULL) {
        return -1;
    }
    int rc = PyList_Check(list) ? PyList_Append(list, value) : -1;
    if (rc < 0 && !PyErr_Occurred()) {
        PyErr_SetString(PyExc_TypeError, "StreamState lists must be lists");
    }
    Py_DECREF(list);
    return rc;
}

enum { OTHER_KIND, CONTENT_KIND, TOOL_KIND, REASONING_KIND };

/* A tool-call chunk: state.tool_calls += 1, and state.first_tool_call set if unset. */
static int
count_tool_call(PyObject *state, PyObject *ts)
{
    PyObject *count = PyObject_GetAttr(state, state_attr.tool_calls);
    PyObject *more = count != NULL ? PyNumber_Add(count, consts.one) : NULL;
    Py_XDECREF(count);
    int rc = more != NULL ? PyObject_SetAttr(state, state_attr.tool_calls, more) : -1;
    Py_XDECREF(more);
    return rc == 0 ? set_if_none(state, state_attr.first_tool_call, ts) : -1;
}

/* One event known not to be plain content nor [DONE]: decoded by orjson and classified
 * here exactly as StreamState.add_decoded classifies it (loadgen.openai.chunks.chunk_kind and
 * StreamState._add_decoded), `offset` being its arrival in µs after the send. Errors,
 * server timings ("metrics", "timings") and anything orjson rejects or that is no object
 * go to the Python methods, which also word the errors. */
static int
classify_decoded(PyObject *state, PyObject *ts, PyObject *offset, PyObject *payload)
{
    PyObject *obj = PyObject_CallOneArg(consts.loads, payload);
    if (obj == NULL || !PyDict_CheckExact(obj)) {
        if (obj == NULL) {
            if (!PyErr_ExceptionMatches(PyExc_ValueError)) {
                return -1;
            }
            PyErr_Clear();
        }
        Py_XDECREF(obj);
        PyObject *res =
            PyObject_CallMethodObjArgs(state, state_attr.add_decoded, ts, payload, NULL);
        Py_XDECREF(res);
        return res == NULL ? -1 : 0;
    }
    int failed = 0, rc = 0;
    PyObject *error = item(obj, key.error, &failed);
    int python = (error != NULL && error != Py_None) || item(obj, key.metrics, &failed)
                 || item(obj, key.timings, &failed);
    if (failed) {
        Py_DECREF(obj);
        return -1;
    }
    if (python) {
        PyObject *res = PyObject_CallMethodObjArgs(state, state_attr.add_object, ts, obj, NULL);
        Py_DECREF(obj);
        Py_XDECREF(res);
        return res == NULL ? -1 : 0;
    }
    int kind = OTHER_KIND;
    PyObject *finish = NULL;
    PyObject *choices = item(obj, key.choices, &failed);
    if (choices != NULL && PyList_Check(choices) && PyList_GET_SIZE(choices) > 0) {
        PyObject *choice = PyList_GET_ITEM(choices, 0);
        if (PyDict_Check(choice)) {
            finish = item(choice, key.finish_reason, &failed);
            PyObject *delta = item(choice, key.delta, &failed);
            if (delta != NULL && PyDict_Check(delta)) {
                if (truthy(item(delta, key.tool_calls, &failed))) {
                    kind = TOOL_KIND;
                }
                else if (truthy(item(delta, key.content, &failed))) {
                    kind = CONTENT_KIND;
                }
                else if (truthy(item(delta, key.reasoning_content, &failed))
                         || truthy(item(delta, key.reasoning, &failed))) {
                    kind = REASONING_KIND;
                }
            }
            else if (truthy(item(choice, key.text, &failed))) {
                kind = CONTENT_KIND;
            }
        }
    }
    PyObject *usage = item(obj, key.usage, &failed);
    PyObject *completion = usage != NULL && PyDict_Check(usage)
                               ? item(usage, key.completion_tokens, &failed)
                               : NULL;
    int counted = completion != NULL && PyLong_Check(completion);
    if (failed) {
        Py_DECREF(obj);
        return -1;
    }
    if (usage != NULL && usage != Py_None) {
        rc = PyObject_SetAttr(state, state_attr.usage_raw, usage);
    }
    if (rc == 0 && finish != NULL && finish != Py_None) {
        rc = PyObject_SetAttr(state, state_attr.finish, finish);
    }
    if (rc == 0 && (kind == CONTENT_KIND || kind == TOOL_KIND)) {
        rc = set_if_none(state, state_attr.first_token, ts);
        if (rc == 0 && kind == TOOL_KIND) {
            rc = count_tool_call(state, ts);
        }
        if (rc == 0) {
            rc = append_to(state, state_attr.content, offset);
        }
        if (rc == 0 && counted) {
            PyObject *last = PyObject_GetAttr(state, state_attr.last_completion);
            PyObject *diff = last != NULL ? PyNumber_Subtract(completion, last) : NULL;
            rc = diff != NULL ? append_to(state, state_attr.tokens, diff) : -1;
            Py_XDECREF(diff);
            Py_XDECREF(last);
        }
        else if (rc == 0) {
            rc = PyObject_SetAttr(state, state_attr.tokens_known, Py_False);
        }
    }
    else if (rc == 0 && kind == REASONING_KIND) {
        rc = set_if_none(state, state_attr.first_reasoning, ts);
        if (rc == 0) {
            rc = append_to(state, state_attr.reasoning, offset);
        }
    }
    if (rc == 0 && counted && kind != OTHER_KIND) {
        rc = PyObject_SetAttr(state, state_attr.last_completion, completion);
    }
    Py_DECREF(obj);
    return rc;
}

/* One block the walk did not take, [pos, stop): `[DONE]` sets state.done, a one-line
 * `data: ` event goes to state.add(ts, payload) (classify_decoded when `other`: it is
 * known not to be plain content), anything else to add_block(state, ts, block) (the
 * decoder's own rules for multi-line events, comments and other fields). */
static int
add_other(PyObject *state, PyObject *ts, PyObject *offset, const char *block, const char *stop,
          int other, PyObject *add_block)
{
    const Py_ssize_t len = stop - block;
    const char *nl = memchr(block, '\n', (size_t)len);
    if (nl == NULL && len >= 6 && memcmp(block, "data: ", 6) == 0) {
        if (len == 12 && memcmp(block + 6, "[DONE]", 6) == 0) {
            return PyObject_SetAttr(state, state_attr.done, Py_True);
        }
        PyObject *payload = PyBytes_FromStringAndSize(block + 6, len - 6);
        if (payload == NULL) {
            return -1;
        }
        int rc;
        if (other) {
            rc = classify_decoded(state, ts, offset, payload);
        }
        else {
            PyObject *res = PyObject_CallMethodObjArgs(state, state_attr.add, ts, payload, NULL);
            rc = res == NULL ? -1 : 0;
            Py_XDECREF(res);
        }
        Py_DECREF(payload);
        return rc;
    }
    PyObject *text = PyBytes_FromStringAndSize(block, len);
    if (text == NULL) {
        return -1;
    }
    PyObject *res = PyObject_CallFunctionObjArgs(add_block, state, ts, text, NULL);
    Py_DECREF(text);
    Py_XDECREF(res);
    return res == NULL ? -1 : 0;
}

/* Add the events of [s, s + n) (whole CR-free blocks), which arrived at `ts`, to `state`.
 * 0, or -1 with an exception set. */
static int
walk_text(PyObject *state, PyObject *ts, const char *s, Py_ssize_t n, PyObject *add_block)
{
    const char *end = s + n;
    PyObject *offset = NULL, *content = NULL;
    Book book = {NULL, 0, 0};
    PyObject *sent = PyObject_GetAttr(state, state_attr.sent_ns);
    if (sent == NULL) {
        return -1;
    }
    /* (ts - sent_ns) // 1000 with Python's own arithmetic, as StreamState.add computes it */
    PyObject *elapsed = PyNumber_Subtract(ts, sent);
    Py_DECREF(sent);
    if (elapsed != NULL) {
        offset = PyNumber_FloorDivide(elapsed, consts.thousand);
        Py_DECREF(elapsed);
    }
    if (offset == NULL) {
        return -1;
    }
    content = PyObject_GetAttr(state, state_attr.content);
    if (content == NULL) {
        goto fail;
    }
    if (!PyList_Check(content)) {
        PyErr_SetString(PyExc_TypeError, "state.content must be a list");
        goto fail;
    }
    if (read_book(state, &book) < 0) {
        goto fail;
    }
    Py_ssize_t pos = 0;
    while (pos < n) {
        int other = 0;
        if (book.usable) {
            int known = 1;
            Py_ssize_t count = walk_plain(s, end, &pos, offset, content, book.tokens, &book.last,
                                          &known, &other);
            if (count < 0) {
                goto fail;
            }
            if (count > 0 && write_book(state, ts, &book, known) < 0) {
                goto fail;
            }
            if (pos >= n) {
                break;
            }
        }
        const char *block = s + pos;
        const char *cut = NULL;
        for (const char *q = block; (q = memchr(q, '\n', (size_t)(end - q))) != NULL; q++) {
            if (q + 1 < end && q[1] == '\n') {
                cut = q;
                break;
            }
        }
        const char *stop = cut != NULL ? cut : end;
        if (add_other(state, ts, offset, block, stop, other, add_block) < 0
            || read_book(state, &book) < 0) {
            goto fail;
        }
        pos = cut != NULL ? (cut - s) + 2 : n;
    }
    Py_XDECREF(book.tokens);
    Py_DECREF(content);
    Py_DECREF(offset);
    return 0;
fail:
    Py_XDECREF(book.tokens);
    Py_XDECREF(content);
    Py_XDECREF(offset);
    return -1;
}

static PyObject *
scan_read(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 4 || !PyLong_Check(args[1]) || !PyBytes_Check(args[2])) {
        PyErr_SetString(PyExc_TypeError,
                        "scan_read(state: StreamState, ts: int, text: bytes, add_block)");
        return NULL;
    }
    PyObject *text = args[2];
    if (walk_text(args[0], args[1], PyBytes_AS_STRING(text), PyBytes_GET_SIZE(text), args[3])
        < 0) {
        return NULL;
    }
    Py_RETURN_NONE;
}

/* The start of the last "\n\n" in [s, s + n), or -1 (bytes.rfind(b"\n\n")). */
static Py_ssize_t
last_separator(const char *s, Py_ssize_t n)
{
    for (Py_ssize_t j = n - 1; j >= 1; j--) {
        if (s[j] == '\n' && s[j - 1] == '\n') {
            return j - 1;
        }
    }
    return -1;
}

/* The start of the first "\n\n" in [s, s + n), or -1 (bytes.find(b"\n\n")). */
static Py_ssize_t
first_separator(const char *s, Py_ssize_t n)
{
    const char *end = s + n;
    for (const char *q = s; (q = memchr(q, '\n', (size_t)(end - q))) != NULL; q++) {
        if (q + 1 < end && q[1] == '\n') {
            return q - s;
        }
    }
    return -1;
}

/* [s, s + n) with each CRLF and each lone CR made one LF, as a new bytes object. */
static PyObject *
normalized(const char *s, Py_ssize_t n)
{
    PyObject *out = PyBytes_FromStringAndSize(NULL, n);
    if (out == NULL) {
        return NULL;
    }
    char *const start = PyBytes_AS_STRING(out);
    char *w = start;
    const char *end = s + n;
    while (s < end) {
        const char *cr = memchr(s, '\r', (size_t)(end - s));
        const char *stop = cr != NULL ? cr : end;
        memcpy(w, s, (size_t)(stop - s));
        w += stop - s;
        if (cr == NULL) {
            break;
        }
        *w++ = '\n';
        s = cr + 1;
        if (s < end && *s == '\n') {
            s++;
        }
    }
    if (_PyBytes_Resize(&out, w - start) < 0) {
        return NULL;
    }
    return out;
}

/* Append [s, s + n) to the bytearray `array` (which grows by amortized steps). */
static int
append_bytes(PyObject *array, const char *s, Py_ssize_t n)
{
    const Py_ssize_t len = PyByteArray_GET_SIZE(array);
    if (n == 0) {
        return 0;
    }
    if (PyByteArray_Resize(array, len + n) < 0) {
        return -1;
    }
    memcpy(PyByteArray_AS_STRING(array) + len, s, (size_t)n);
    return 0;
}

/* Whether the pending event is certain to exceed `limit`: its last LF may be the first half
 * of the blank line, and does not count (SSEDecoder._check_pending). */
static int
pending_over(PyObject *pending, Py_ssize_t limit)
{
    Py_ssize_t len = PyByteArray_GET_SIZE(pending);
    if (len > 0 && PyByteArray_AS_STRING(pending)[len - 1] == '\n') {
        len--;
    }
    return len > limit;
}

/* The end of the text of whole blocks of [s, s + end) to walk when one of them is longer
 * than `limit`: the blocks before it (-1: none), as SSEDecoder._blocks returns them; `end`
 * when none is. */
static Py_ssize_t
walkable(const char *s, Py_ssize_t end, Py_ssize_t limit)
{
    Py_ssize_t start = 0;
    for (;;) {
        const Py_ssize_t sep = first_separator(s + start, end - start);
        const Py_ssize_t stop = sep < 0 ? end : start + sep;
        if (stop - start > limit) {
            return start - 2;
        }
        if (sep < 0) {
            return end;
        }
        start = stop + 2;
    }
}

/* Read the decoder's framing state: whether it refused the stream (1), its limit and its
 * pending bytearray (a new reference). -1 with an exception set. */
static int
read_decoder(PyObject *decoder, int *cr, Py_ssize_t *limit, PyObject **pending)
{
    PyObject *error = PyObject_GetAttr(decoder, decoder_attr.error);
    if (error == NULL) {
        return -1;
    }
    const int refused = error != Py_None;
    Py_DECREF(error);
    if (refused) {
        return 1;
    }
    PyObject *flag = PyObject_GetAttr(decoder, decoder_attr.cr);
    if (flag == NULL) {
        return -1;
    }
    *cr = PyObject_IsTrue(flag);
    Py_DECREF(flag);
    if (*cr < 0) {
        return -1;
    }
    PyObject *value = PyObject_GetAttr(decoder, decoder_attr.limit);
    if (value == NULL) {
        return -1;
    }
    *limit = PyLong_AsSsize_t(value);
    Py_DECREF(value);
    if (*limit == -1 && PyErr_Occurred()) {
        return -1;
    }
    *pending = PyObject_GetAttr(decoder, decoder_attr.pending);
    if (*pending == NULL) {
        return -1;
    }
    if (!PyByteArray_Check(*pending)) {
        Py_CLEAR(*pending);
        PyErr_SetString(PyExc_TypeError, "SSEDecoder._pending must be a bytearray");
        return -1;
    }
    return 0;
}

/* The decoder refuses the stream: decoder._refuse(), which words the error and lets the
 * pending event go. */
static int
refuse(PyObject *decoder)
{
    PyObject *res = PyObject_CallMethodObjArgs(decoder, decoder_attr.refuse, NULL);
    Py_XDECREF(res);
    return res == NULL ? -1 : 0;
}

/* After the events before the refusal were added: the state's error becomes the
 * decoder's, unless one of those events set one. */
static int
note_refusal(PyObject *decoder, PyObject *state)
{
    PyObject *error = PyObject_GetAttr(decoder, decoder_attr.error);
    if (error == NULL) {
        return -1;
    }
    const int rc = set_if_none(state, state_attr.error, error);
    Py_DECREF(error);
    return rc;
}

/* One socket read: framed as SSEDecoder._blocks frames it (line ends normalized as they
 * arrive, only the new bytes searched for the blank line, the event not yet complete kept
 * in decoder._pending up to the decoder's limit), the events it completed walked. True
 * once the stream is refused (an event beyond the limit). */
static PyObject *
scan_feed(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 5 || !PyLong_Check(args[3]) || !PyBytes_Check(args[4])) {
        PyErr_SetString(PyExc_TypeError,
                        "scan_feed(decoder: SSEDecoder, state: StreamState, add_block, "
                        "ts: int, data: bytes)");
        return NULL;
    }
    PyObject *decoder = args[0], *state = args[1], *add_block = args[2], *ts = args[3];
    const char *s = PyBytes_AS_STRING(args[4]);
    Py_ssize_t n = PyBytes_GET_SIZE(args[4]);
    int cr = 0;
    Py_ssize_t limit = 0;
    PyObject *pending = NULL;
    PyObject *owned = NULL; /* what `s` points into when it is not the read itself */
    const int status = read_decoder(decoder, &cr, &limit, &pending);
    if (status != 0) {
        return status < 0 ? NULL : Py_NewRef(Py_True);
    }
    if (n == 0) {
        Py_DECREF(pending);
        Py_RETURN_FALSE;
    }
    if (cr && s[0] == '\n') { /* the LF of a CRLF whose CR ended the last read */
        s++;
        n--;
    }
    const int ends_cr = n > 0 && s[n - 1] == '\r';
    int rc = 0;
    if (ends_cr != cr) {
        rc = PyObject_SetAttr(decoder, decoder_attr.cr, ends_cr ? Py_True : Py_False);
    }
    int refused = 0;
    if (rc < 0 || n == 0) {
        goto done;
    }
    if (memchr(s, '\r', (size_t)n) != NULL) {
        owned = normalized(s, n);
        if (owned == NULL) {
            rc = -1;
            goto done;
        }
        s = PyBytes_AS_STRING(owned);
        n = PyBytes_GET_SIZE(owned);
    }
    const Py_ssize_t held = PyByteArray_GET_SIZE(pending);
    const int straddle = held > 0 && PyByteArray_AS_STRING(pending)[held - 1] == '\n' && s[0] == '\n';
    Py_ssize_t last = last_separator(s, n);
    if (last < 0 && !straddle) { /* no event completes: the read joins the pending one */
        rc = append_bytes(pending, s, n);
        if (rc == 0 && pending_over(pending, limit)) {
            refused = 1;
            rc = refuse(decoder);
            if (rc == 0) {
                rc = note_refusal(decoder, state);
            }
        }
        goto done;
    }
    if (held > 0) { /* the pending event completes: copied once, with the read */
        PyObject *joined = PyBytes_FromStringAndSize(NULL, held + n);
        if (joined == NULL) {
            rc = -1;
            goto done;
        }
        memcpy(PyBytes_AS_STRING(joined), PyByteArray_AS_STRING(pending), (size_t)held);
        memcpy(PyBytes_AS_STRING(joined) + held, s, (size_t)n);
        Py_XSETREF(owned, joined);
        s = PyBytes_AS_STRING(owned);
        n = held + n;
        rc = PyByteArray_Resize(pending, 0);
        if (rc < 0) {
            goto done;
        }
        last = last_separator(s, n); /* no further back than the pending event's last LF */
    }
    /* The last separator is the last LF pair of its run, paired from the run's start (the
     * first separator's split: a third LF starts the next block). */
    Py_ssize_t run = last;
    while (run > 0 && s[run - 1] == '\n') {
        run--;
    }
    const Py_ssize_t rest = run + ((last + 2 - run) / 2) * 2;
    Py_ssize_t end = rest - 2; /* the text of the whole blocks: [s, s + end) */
    if (end > limit) {         /* one of them may be too long */
        const Py_ssize_t upto = walkable(s, end, limit);
        refused = upto < end;
        end = upto;
    }
    if (!refused) {
        rc = append_bytes(pending, s + rest, n - rest);
        refused = rc == 0 && pending_over(pending, limit);
    }
    if (rc == 0 && refused) {
        rc = refuse(decoder); /* before the walk, as _blocks does */
    }
    if (rc == 0 && end > 0) {
        rc = walk_text(state, ts, s, end, add_block);
    }
    if (rc == 0 && refused) { /* after it: an event walked may have set its error first */
        rc = note_refusal(decoder, state);
    }
done:
    Py_XDECREF(owned);
    Py_DECREF(pending);
    if (rc < 0) {
        return NULL;
    }
    return Py_NewRef(refused ? Py_True : Py_False);
}

static PyMethodDef methods[] = {
    {"scan_read", (PyCFunction)(void (*)(void))scan_read, METH_FASTCALL,
     "scan_read(state, ts, text, add_block) -> None: add the events of one read's text "
     "(whole blocks, as SSEDecoder.feed_raw returns them) to state, stamped ts."},
    {"scan_feed", (PyCFunction)(void (*)(void))scan_feed, METH_FASTCALL,
     "scan_feed(decoder, state, add_block, ts, data) -> None: one socket read of an SSE "
     "body: framed as decoder.feed_raw frames it, its events added as scan_read adds them."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "_sse_scan", "The per-read event walk of loadgen.stream.feed, in C.",
    0, methods, NULL, NULL, NULL, NULL,
};

static int
intern(PyObject **slot, const char *name)
{
    *slot = PyUnicode_InternFromString(name);
    return *slot == NULL ? -1 : 0;
}

PyMODINIT_FUNC
PyInit__sse_scan(void)
{
    consts.empty = PyBytes_FromStringAndSize(NULL, 0);
    consts.thousand = PyLong_FromLong(1000);
    consts.one = PyLong_FromLong(1);
    if (consts.empty == NULL || consts.thousand == NULL || consts.one == NULL) {
        return NULL;
    }
    PyObject *orjson = PyImport_ImportModule("orjson");
    if (orjson == NULL) {
        return NULL;
    }
    consts.loads = PyObject_GetAttrString(orjson, "loads");
    Py_DECREF(orjson);
    if (consts.loads == NULL) {
        return NULL;
    }
    if (intern(&state_attr.add, "add") < 0 || intern(&state_attr.add_decoded, "add_decoded") < 0
        || intern(&state_attr.add_object, "_add_decoded") < 0
        || intern(&state_attr.content, "content") < 0 || intern(&state_attr.done, "done") < 0
        || intern(&state_attr.error, "error") < 0
        || intern(&state_attr.finish, "finish") < 0
        || intern(&state_attr.first_reasoning, "first_reasoning") < 0
        || intern(&state_attr.first_token, "first_token") < 0
        || intern(&state_attr.first_tool_call, "first_tool_call") < 0
        || intern(&state_attr.last_completion, "last_completion") < 0
        || intern(&state_attr.reasoning, "reasoning") < 0
        || intern(&state_attr.sent_ns, "sent_ns") < 0 || intern(&state_attr.tokens, "tokens") < 0
        || intern(&state_attr.tokens_known, "tokens_known") < 0
        || intern(&state_attr.tool_calls, "tool_calls") < 0
        || intern(&state_attr.usage_raw, "usage_raw") < 0) {
        return NULL;
    }
    if (intern(&decoder_attr.cr, "_cr") < 0 || intern(&decoder_attr.error, "error") < 0
        || intern(&decoder_attr.limit, "_limit") < 0
        || intern(&decoder_attr.pending, "_pending") < 0
        || intern(&decoder_attr.refuse, "_refuse") < 0) {
        return NULL;
    }
    if (intern(&key.choices, "choices") < 0
        || intern(&key.completion_tokens, "completion_tokens") < 0
        || intern(&key.content, "content") < 0 || intern(&key.delta, "delta") < 0
        || intern(&key.error, "error") < 0 || intern(&key.finish_reason, "finish_reason") < 0
        || intern(&key.metrics, "metrics") < 0 || intern(&key.reasoning, "reasoning") < 0
        || intern(&key.reasoning_content, "reasoning_content") < 0
        || intern(&key.text, "text") < 0 || intern(&key.timings, "timings") < 0
        || intern(&key.tool_calls, "tool_calls") < 0 || intern(&key.usage, "usage") < 0) {
        return NULL;
    }
    return PyModule_Create(&module_def);
}
