/* Scanning a JSON array of arrays of int32 (a group's "tokens" or "masks") into packed int32s.
 *
 * int_rows(data, pos) -> (end, row_lengths, values) | None
 *
 * Reads the JSON value starting at data[pos] (after optional whitespace). When it is an array
 * of arrays of JSON integers that all fit in int32, returns the offset just past its closing
 * bracket, the list of row lengths and the values as little-endian int32 bytes, back to back.
 * For anything else (a float, a nested array, a string, a leading zero, a value out of int32,
 * malformed or truncated JSON) returns None: the caller then decodes the body another way,
 * which decides whether and why it is invalid. Never raises for bad input.
 *
 * This is the part of an ingest request that dominates its cost: 8 sequences of 512 tokens are
 * 8192 numbers, and a general JSON parser spends most of its time building them into a document
 * that is then copied out again. Here each number is read once, straight into its int32 slot.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define INT32_LIMIT 2147483648ULL /* |INT32_MIN|; INT32_MAX is one less */
#define MAX_DIGITS 10             /* INT32_MIN has 10 digits; more can only be out of range */

static inline const unsigned char *skip_whitespace(const unsigned char *p, const unsigned char *end) {
    while (p < end && (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t')) p++;
    return p;
}

/* Leading ASCII digits of the 8 bytes at p (0-8); value receives their value when 1-7 of them.
 * Bytes are tested as a whole word: a byte is a digit iff its high nibble is 3 and adding 6 keeps
 * it so. A carry out of a byte of 0xFA-0xFF can only disturb the bytes after the first non-digit,
 * which are not looked at. The conversion multiplies pairs, then pairs of pairs, of digits. */
static inline int leading_digits(const unsigned char *p, uint64_t *value) {
    uint64_t word;
    memcpy(&word, p, 8);
    uint64_t not_digit = ((word & 0xF0F0F0F0F0F0F0F0ULL) ^ 0x3030303030303030ULL) |
                         (((word + 0x0606060606060606ULL) & 0xF0F0F0F0F0F0F0F0ULL) ^ 0x3030303030303030ULL);
    if (not_digit == 0) return 8;
    int count = __builtin_ctzll(not_digit) >> 3;
    if (count == 0) return 0;
    /* little-endian: the first digit is the lowest byte; shift the digits to the top, so the
     * bytes below them read as leading zeros */
    uint64_t x = (word - 0x3030303030303030ULL) << (8 * (8 - count));
    x = x * 10 + (x >> 8);
    x = (((x & 0x000000FF000000FFULL) * (100 + (1000000ULL << 32))) +
         (((x >> 16) & 0x000000FF000000FFULL) * (1 + (10000ULL << 32)))) >> 32;
    *value = x;
    return count;
}

/* One JSON integer at *pp into *out; 0 when it is not a plain int32 (the caller declines). */
static inline int read_int32(const unsigned char **pp, const unsigned char *end, int32_t *out) {
    const unsigned char *p = *pp;
    int negative = 0;
    if (p < end && *p == '-') {
        negative = 1;
        p++;
    }
    const unsigned char *first = p;
    uint64_t value = 0;
    int count = PY_LITTLE_ENDIAN && end - p >= 8 ? leading_digits(p, &value) : -1;
    if (count >= 1 && count <= 7) {
        p += count;
    } else {
        /* near the end of the buffer, or 8 digits or more */
        if (count == 0) return 0;
        while (p < end && (unsigned)(*p - '0') <= 9) {
            if (p - first == MAX_DIGITS) return 0;
            value = value * 10 + (unsigned)(*p - '0');
            p++;
        }
        count = (int)(p - first);
        if (count == 0) return 0;
    }
    if (count > 1 && *first == '0') return 0; /* JSON has no leading zeros */
    if (p >= end || *p == '.' || *p == 'e' || *p == 'E') return 0; /* a float: not for this scanner */
    if (value > INT32_LIMIT - (negative ? 0 : 1)) return 0;
    *out = negative ? (int32_t)(-(int64_t)value) : (int32_t)value;
    *pp = p;
    return 1;
}

static PyObject *int_rows(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "int_rows(data, pos) takes 2 arguments");
        return NULL;
    }
    Py_ssize_t pos = PyLong_AsSsize_t(args[1]);
    if (pos == -1 && PyErr_Occurred()) return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0) return NULL;

    PyObject *lengths = NULL, *values = NULL, *result = NULL;
    const unsigned char *start = (const unsigned char *)view.buf;
    const unsigned char *end = start + view.len;
    if (pos < 0 || pos > view.len) goto decline;
    const unsigned char *p = skip_whitespace(start + pos, end);
    if (p >= end || *p != '[') goto decline;
    p++;
    /* every number takes at least two bytes with its separator: room for all of them */
    values = PyBytes_FromStringAndSize(NULL, ((end - p) / 2 + 1) * (Py_ssize_t)sizeof(int32_t));
    lengths = PyList_New(0);
    if (values == NULL || lengths == NULL) goto error;
    int32_t *out = (int32_t *)PyBytes_AS_STRING(values);
    Py_ssize_t n = 0;

    p = skip_whitespace(p, end);
    if (p < end && *p == ']') {
        p++;
        goto done;
    }
    for (;;) { /* one row per turn */
        p = skip_whitespace(p, end);
        if (p >= end || *p != '[') goto decline;
        p = skip_whitespace(p + 1, end);
        Py_ssize_t row_start = n;
        if (p < end && *p == ']') {
            p++;
        } else {
            for (;;) { /* one number per turn */
                if (!read_int32(&p, end, &out[n])) goto decline;
                n++;
                if (end - p >= 3 && p[0] == ',' && p[1] == ' ' && p[2] > ' ') { /* json.dumps' separator */
                    p += 2;
                    continue;
                }
                p = skip_whitespace(p, end);
                if (p >= end) goto decline;
                if (*p == ',') {
                    p = skip_whitespace(p + 1, end);
                    continue;
                }
                if (*p == ']') {
                    p++;
                    break;
                }
                goto decline;
            }
        }
        PyObject *length = PyLong_FromSsize_t(n - row_start);
        if (length == NULL) goto error;
        int appended = PyList_Append(lengths, length);
        Py_DECREF(length);
        if (appended < 0) goto error;
        p = skip_whitespace(p, end);
        if (p >= end) goto decline;
        if (*p == ',') {
            p++;
            continue;
        }
        if (*p == ']') {
            p++;
            break;
        }
        goto decline;
    }
done:
    if (PY_BIG_ENDIAN) {
        for (Py_ssize_t i = 0; i < n; i++) out[i] = (int32_t)__builtin_bswap32((uint32_t)out[i]);
    }
    if (_PyBytes_Resize(&values, n * (Py_ssize_t)sizeof(int32_t)) < 0) {
        values = NULL; /* freed by _PyBytes_Resize */
        goto error;
    }
    result = Py_BuildValue("nNN", (Py_ssize_t)(p - start), lengths, values);
    PyBuffer_Release(&view);
    return result;
decline:
    Py_XDECREF(lengths);
    Py_XDECREF(values);
    PyBuffer_Release(&view);
    Py_RETURN_NONE;
error:
    Py_XDECREF(lengths);
    Py_XDECREF(values);
    PyBuffer_Release(&view);
    return NULL;
}

static PyMethodDef methods[] = {
    {"int_rows", (PyCFunction)(void (*)(void))int_rows, METH_FASTCALL,
     "int_rows(data, pos) -> (end, row_lengths, int32_le_values) | None\n\n"
     "The JSON array of int32 arrays at data[pos:], or None for anything else."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    "_int_rows",
    "Scanning JSON matrices of int32 (token ids and masks) without a Python object per number.",
    -1,
    methods,
};

PyMODINIT_FUNC PyInit__int_rows(void) { return PyModule_Create(&module); }
