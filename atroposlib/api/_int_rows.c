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
 * int_rows_pair(data, pos_a, pos_b) -> (end_a, lengths_a, values_a, end_b, lengths_b, values_b) | None
 *
 * Both matrices at once (a group's tokens and masks), None unless both are plain. Reading a
 * number waits on finding where the one before it ended; alternating between two independent
 * matrices gives the CPU a second chain of work to overlap with the first (about a quarter
 * less time than two int_rows calls).
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

static int append_length(PyObject *lengths, Py_ssize_t length) {
    PyObject *item = PyLong_FromSsize_t(length);
    if (item == NULL) return -1;
    int appended = PyList_Append(lengths, item);
    Py_DECREF(item);
    return appended;
}

/* Where a matrix's scan is: at its outer '[', at a row's '[', inside a row (at a number), after a
 * row, or past the closing ']'. */
enum { OUTER_OPEN, ROW_OPEN, IN_ROW, AFTER_ROW, CLOSED };

/* What a step says: go on, the matrix is closed, decline, or a Python error is set. */
enum { GO_ON, DONE, DECLINE, ERROR };

typedef struct {
    const unsigned char *p;
    int32_t *out; /* the values, in the bytes object below */
    Py_ssize_t n, row_start;
    int state;
    PyObject *lengths, *values;
} Matrix;

/* The brackets and commas around and between rows. */
static int structure_step(Matrix *m, const unsigned char *end) {
    const unsigned char *p = skip_whitespace(m->p, end);
    if (p >= end) return DECLINE;
    switch (m->state) {
    case OUTER_OPEN:
    case ROW_OPEN:
        if (*p != '[') return DECLINE;
        p = skip_whitespace(p + 1, end);
        if (m->state == OUTER_OPEN) {
            m->state = p < end && *p == ']' ? CLOSED : ROW_OPEN;
            m->p = m->state == CLOSED ? p + 1 : p;
            return m->state == CLOSED ? DONE : GO_ON;
        }
        m->row_start = m->n;
        if (p < end && *p == ']') { /* an empty row */
            if (append_length(m->lengths, 0) < 0) return ERROR;
            m->p = p + 1;
            m->state = AFTER_ROW;
            return GO_ON;
        }
        m->p = p;
        m->state = IN_ROW;
        return GO_ON;
    case AFTER_ROW:
        if (*p != ',' && *p != ']') return DECLINE;
        m->p = p + 1;
        m->state = *p == ',' ? ROW_OPEN : CLOSED;
        return m->state == CLOSED ? DONE : GO_ON;
    default:
        return m->state == CLOSED ? DONE : DECLINE;
    }
}

/* One step: a number and the separator after it, or a piece of the structure. */
static inline int step(Matrix *m, const unsigned char *end) {
    if (m->state != IN_ROW) return structure_step(m, end);
    const unsigned char *p = m->p;
    if (!read_int32(&p, end, &m->out[m->n])) return DECLINE;
    m->n++;
    if (end - p >= 3 && p[0] == ',' && p[1] == ' ' && p[2] > ' ') { /* json.dumps' separator */
        m->p = p + 2;
        return GO_ON;
    }
    p = skip_whitespace(p, end);
    if (p >= end) return DECLINE;
    if (*p == ',') {
        m->p = skip_whitespace(p + 1, end);
        return GO_ON;
    }
    if (*p != ']') return DECLINE;
    if (append_length(m->lengths, m->n - m->row_start) < 0) return ERROR;
    m->p = p + 1;
    m->state = AFTER_ROW;
    return GO_ON;
}

/* A matrix ready to be scanned from data[pos]; GO_ON, DECLINE, or ERROR. */
static int matrix_open(Matrix *m, const unsigned char *start, const unsigned char *end, Py_ssize_t pos) {
    m->lengths = m->values = NULL;
    if (pos < 0 || pos > end - start) return DECLINE;
    m->p = skip_whitespace(start + pos, end);
    m->n = m->row_start = 0;
    m->state = OUTER_OPEN;
    /* every number takes at least two bytes with its separator: room for all of them */
    m->values = PyBytes_FromStringAndSize(NULL, ((end - m->p) / 2 + 1) * (Py_ssize_t)sizeof(int32_t));
    m->lengths = PyList_New(0);
    if (m->values == NULL || m->lengths == NULL) return ERROR;
    m->out = (int32_t *)PyBytes_AS_STRING(m->values);
    return GO_ON;
}

/* (end, lengths, values) of a closed matrix, consuming its references; NULL on error. */
static PyObject *matrix_result(Matrix *m, const unsigned char *start) {
    if (PY_BIG_ENDIAN) {
        for (Py_ssize_t i = 0; i < m->n; i++) m->out[i] = (int32_t)__builtin_bswap32((uint32_t)m->out[i]);
    }
    if (_PyBytes_Resize(&m->values, m->n * (Py_ssize_t)sizeof(int32_t)) < 0) {
        m->values = NULL; /* freed by _PyBytes_Resize */
        return NULL;
    }
    PyObject *result = Py_BuildValue("nNN", (Py_ssize_t)(m->p - start), m->lengths, m->values);
    m->lengths = m->values = NULL;
    return result;
}

/* Scans `count` matrices (1 or 2) of one buffer, a step of each in turn. */
static PyObject *scan(PyObject *const *args, Py_ssize_t nargs, int count) {
    if (nargs != 1 + count) {
        PyErr_Format(PyExc_TypeError, "expected %d arguments", 1 + count);
        return NULL;
    }
    Py_ssize_t pos[2];
    for (int i = 0; i < count; i++) {
        pos[i] = PyLong_AsSsize_t(args[1 + i]);
        if (pos[i] == -1 && PyErr_Occurred()) return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0) return NULL;
    const unsigned char *start = (const unsigned char *)view.buf, *end = start + view.len;
    Matrix m[2] = {{0}, {0}};
    int status[2] = {GO_ON, DONE};
    for (int i = 0; i < count; i++) status[i] = matrix_open(&m[i], start, end, pos[i]);
    while (status[0] == GO_ON && status[1] == GO_ON) {
        status[0] = step(&m[0], end);
        status[1] = step(&m[1], end);
    }
    for (int i = 0; i < count; i++) {
        while (status[i] == GO_ON) status[i] = step(&m[i], end);
    }
    PyObject *result = NULL;
    if (status[0] == ERROR || status[1] == ERROR) {
        result = NULL;
    } else if (status[0] == DECLINE || status[1] == DECLINE) {
        result = Py_NewRef(Py_None);
    } else if (count == 1) {
        result = matrix_result(&m[0], start);
    } else {
        PyObject *a = matrix_result(&m[0], start);
        PyObject *b = a ? matrix_result(&m[1], start) : NULL;
        result = b ? PySequence_Concat(a, b) : NULL;
        Py_XDECREF(a);
        Py_XDECREF(b);
    }
    for (int i = 0; i < 2; i++) {
        Py_XDECREF(m[i].lengths);
        Py_XDECREF(m[i].values);
    }
    PyBuffer_Release(&view);
    return result;
}

static PyObject *int_rows(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    return scan(args, nargs, 1);
}

static PyObject *int_rows_pair(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    return scan(args, nargs, 2);
}

static PyMethodDef methods[] = {
    {"int_rows", (PyCFunction)(void (*)(void))int_rows, METH_FASTCALL,
     "int_rows(data, pos) -> (end, row_lengths, int32_le_values) | None\n\n"
     "The JSON array of int32 arrays at data[pos:], or None for anything else."},
    {"int_rows_pair", (PyCFunction)(void (*)(void))int_rows_pair, METH_FASTCALL,
     "int_rows_pair(data, pos_a, pos_b) -> int_rows(data, pos_a) + int_rows(data, pos_b) | None\n\n"
     "Both matrices, scanned together; None unless both are plain."},
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
