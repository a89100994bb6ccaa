/* Wire-format decoder for serialized onnx.NodeProto messages: the loader's per-node field reads in C.
 *
 * decode_nodes(blobs) takes an iterable of bytes (each one serialized NodeProto) and returns a list of
 *   (op_type, domain, name, inputs, outputs, attributes, metadata)
 * with inputs/outputs tuples of str, attributes a tuple of the serialized AttributeProto bytes, and
 * metadata a tuple of (key, value) pairs from metadata_props.
 *
 * Contract (tests/test_nodewire.py holds it against protobuf's own parser on valid and mutated bytes):
 * when this returns, protobuf parses every blob as a NodeProto with exactly these field values, each
 * attribute left as its bytes (the loader parses every distinct attribute with AttributeProto itself,
 * as on its raw-attribute path).
 * Whatever it cannot vouch for raises ValueError, and the loader then reads the file on its general
 * path (onnx.load), which gives the result or the error: malformed framing, a group, a non-UTF-8
 * string (proto2 gives such a field back as bytes), a device_configurations submessage (protobuf
 * validates its contents; nothing here reads them). Unknown fields are skipped, as protobuf keeps
 * them unparsed; a known field with another wire type is an unknown field to protobuf too.
 *
 * Every read is bounds-checked against the blob; no recursion; no allocation that a blob's
 * contents size beyond its own length.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

/* onnx/onnx.proto NodeProto and StringStringEntryProto field numbers (checked by the tests). */
enum {
    NODE_INPUT = 1,
    NODE_OUTPUT = 2,
    NODE_NAME = 3,
    NODE_OP_TYPE = 4,
    NODE_ATTRIBUTE = 5,
    NODE_DOMAIN = 7,
    NODE_METADATA_PROPS = 9,
    NODE_DEVICE_CONFIGURATIONS = 10,
    ENTRY_KEY = 1,
    ENTRY_VALUE = 2,
};

enum { WIRE_VARINT = 0, WIRE_FIXED64 = 1, WIRE_LEN = 2, WIRE_FIXED32 = 5 };

#define MAX_VARINT_BYTES 10
/* upb reads a tag or a length in at most 5 bytes (some versions a length in 10): longer is corrupt. */
#define MAX_TAG_OR_LENGTH_BYTES 5
#define MAX_FIELD_NUMBER 536870911 /* 2^29 - 1 */
#define MAX_LENGTH 2147483646 /* upb: a length of INT32_MAX or more is corrupt */

typedef struct {
    const uint8_t *pos;
    const uint8_t *end;
} Reader;

/* 0 and the value, or -1 on a truncated or over-long varint. */
static int read_varint(Reader *r, uint64_t *out) {
    uint64_t value = 0;
    for (int i = 0; i < MAX_VARINT_BYTES; i++) {
        if (r->pos >= r->end) return -1;
        uint8_t byte = *r->pos++;
        value |= (uint64_t)(byte & 0x7f) << (7 * i);
        if (!(byte & 0x80)) {
            if (i == MAX_VARINT_BYTES - 1 && byte > 1) return -1; /* more than 64 bits (upb drops them): left to it */
            *out = value;
            return 0;
        }
    }
    return -1;
}

/* A tag or a length: as read_varint, and -1 on an encoding longer than upb takes for one. */
static int read_tag_or_length(Reader *r, uint64_t *out) {
    const uint8_t *begin = r->pos;
    if (read_varint(r, out) < 0) return -1;
    return r->pos - begin > MAX_TAG_OR_LENGTH_BYTES ? -1 : 0;
}

/* The next field's number and wire type; for WIRE_LEN also its payload [*start, *start + *len). */
static int read_field(Reader *r, uint32_t *number, int *wire, const uint8_t **start, Py_ssize_t *len) {
    uint64_t key;
    if (read_tag_or_length(r, &key) < 0) return -1;
    if (key >> 3 == 0 || key >> 3 > MAX_FIELD_NUMBER) return -1;
    *number = (uint32_t)(key >> 3);
    *wire = (int)(key & 7);
    uint64_t skip;
    switch (*wire) {
    case WIRE_VARINT:
        return read_varint(r, &skip);
    case WIRE_FIXED64:
        if (r->end - r->pos < 8) return -1;
        r->pos += 8;
        return 0;
    case WIRE_FIXED32:
        if (r->end - r->pos < 4) return -1;
        r->pos += 4;
        return 0;
    case WIRE_LEN:
        if (read_tag_or_length(r, &skip) < 0) return -1;
        if (skip > MAX_LENGTH || skip > (uint64_t)(r->end - r->pos)) return -1;
        *start = r->pos;
        *len = (Py_ssize_t)skip;
        r->pos += skip;
        return 0;
    default: /* groups (3, 4) and the reserved wire types 6, 7: left to protobuf */
        return -1;
    }
}

static PyObject *malformed(const char *what) {
    PyErr_Format(PyExc_ValueError, "NodeProto wire format: %s", what);
    return NULL;
}

/* The next length-delimited field (every field read here is one; others are skipped): 1 and its
 * number and payload, 0 at the end of the message, -1 with a ValueError on malformed framing. */
static int next_len_field(Reader *r, uint32_t *number, const uint8_t **payload, Py_ssize_t *size) {
    while (r->pos < r->end) {
        int wire;
        if (read_field(r, number, &wire, payload, size) < 0) {
            malformed("truncated or malformed field");
            return -1;
        }
        if (wire == WIRE_LEN) return 1;
    }
    return 0;
}

/* A str from UTF-8 bytes; NULL with ValueError (UnicodeDecodeError) when they are not UTF-8.
 * Names are ASCII nearly always: copied straight into a 1-byte str, without the decoder's set-up. */
static PyObject *text(const uint8_t *start, Py_ssize_t len) {
    for (Py_ssize_t i = 0; i < len; i++) {
        if (start[i] & 0x80) return PyUnicode_DecodeUTF8((const char *)start, len, NULL);
    }
    PyObject *value = PyUnicode_New(len, 127);
    if (value != NULL && len > 0) memcpy(PyUnicode_1BYTE_DATA(value), start, (size_t)len);
    return value;
}

/* Replace *slot (a singular field: the last occurrence wins, as in protobuf). */
static int set_text(PyObject **slot, const uint8_t *start, Py_ssize_t len) {
    PyObject *value = text(start, len);
    if (value == NULL) return -1;
    Py_XSETREF(*slot, value);
    return 0;
}

/* One StringStringEntryProto as a (key, value) tuple. */
static PyObject *entry(const uint8_t *start, Py_ssize_t len) {
    Reader r = {start, start + len};
    PyObject *key = NULL, *value = NULL, *pair = NULL;
    uint32_t number;
    const uint8_t *payload = NULL;
    Py_ssize_t size = 0;
    int more;
    while ((more = next_len_field(&r, &number, &payload, &size)) > 0) {
        if (number == ENTRY_KEY) {
            if (set_text(&key, payload, size) < 0) goto done;
        } else if (number == ENTRY_VALUE) {
            if (set_text(&value, payload, size) < 0) goto done;
        }
    }
    if (more < 0) goto done;
    if (key == NULL && (key = PyUnicode_New(0, 127)) == NULL) goto done;
    if (value == NULL && (value = PyUnicode_New(0, 127)) == NULL) goto done;
    pair = PyTuple_Pack(2, key, value);
done:
    Py_XDECREF(key);
    Py_XDECREF(value);
    return pair;
}

/* op_type and domain repeat on every node: one str per distinct spelling, shared by every node that
 * names it (its hash is computed once), found by its bytes in a small table that lives for one
 * decode_nodes call (no str is made to look one up). Not interned: on Python 3.12 interned strs are
 * never freed, and a file's op types are its own. */
static const uint8_t NOTHING[1] = {0}; /* the bytes of an absent field: "" */
#define SYMBOLS 256 /* a power of two; a graph has a few dozen op types and domains */

typedef struct {
    PyObject *str[SYMBOLS]; /* ASCII strs; NULL: free slot */
    Py_ssize_t used;
} Symbols;

static PyObject *symbol(Symbols *table, const uint8_t *start, Py_ssize_t len) {
    uint32_t hash = 2166136261u; /* FNV-1a */
    for (Py_ssize_t i = 0; i < len; i++) hash = (hash ^ start[i]) * 16777619u;
    for (uint32_t probe = 0; probe < SYMBOLS; probe++) {
        PyObject **slot = &table->str[(hash + probe) & (SYMBOLS - 1)];
        if (*slot == NULL) {
            if (table->used >= SYMBOLS / 2) break; /* keep probes short: too many distinct ones, decode */
            PyObject *value = text(start, len);
            if (value == NULL) return NULL;
            if (!PyUnicode_IS_ASCII(value)) return value; /* not kept: the table compares ASCII bytes */
            Py_INCREF(value);
            *slot = value;
            table->used++;
            return value;
        }
        if (PyUnicode_GET_LENGTH(*slot) == len && memcmp(PyUnicode_1BYTE_DATA(*slot), start, (size_t)len) == 0) {
            Py_INCREF(*slot);
            return *slot;
        }
    }
    return text(start, len);
}

static void clear_symbols(Symbols *table) {
    for (int i = 0; i < SYMBOLS; i++) Py_CLEAR(table->str[i]);
    table->used = 0;
}

/* Replace *slot with the table's str for these bytes. */
static int set_symbol(Symbols *table, PyObject **slot, const uint8_t *start, Py_ssize_t len) {
    PyObject *value = symbol(table, start, len);
    if (value == NULL) return -1;
    Py_XSETREF(*slot, value);
    return 0;
}

/* The repeated fields of a node, counted in a first pass so that each tuple is made at its size. */
typedef struct {
    Py_ssize_t inputs, outputs, attributes, metadata;
} Counts;

static int count_fields(const uint8_t *start, Py_ssize_t len, Counts *counts) {
    Reader r = {start, start + len};
    uint32_t number;
    const uint8_t *payload = NULL;
    Py_ssize_t size = 0;
    int more;
    while ((more = next_len_field(&r, &number, &payload, &size)) > 0) {
        switch (number) {
        case NODE_INPUT: counts->inputs++; break;
        case NODE_OUTPUT: counts->outputs++; break;
        case NODE_ATTRIBUTE: counts->attributes++; break;
        case NODE_METADATA_PROPS: counts->metadata++; break;
        case NODE_DEVICE_CONFIGURATIONS: malformed("device_configurations is left to protobuf"); return -1;
        default: break; /* name, op_type, domain; doc_string, overload, unknown fields: never read */
        }
    }
    return more;
}

static PyObject *decode_node(const uint8_t *start, Py_ssize_t len, Symbols *symbols) {
    Counts counts = {0, 0, 0, 0};
    if (count_fields(start, len, &counts) < 0) return NULL;
    PyObject *op_type = NULL, *domain = NULL, *name = NULL, *result = NULL;
    PyObject *inputs = PyTuple_New(counts.inputs), *outputs = PyTuple_New(counts.outputs);
    PyObject *attributes = PyTuple_New(counts.attributes), *metadata = PyTuple_New(counts.metadata);
    if (inputs == NULL || outputs == NULL || attributes == NULL || metadata == NULL) goto done;
    Py_ssize_t n_in = 0, n_out = 0, n_attr = 0, n_meta = 0;
    Reader r = {start, start + len};
    uint32_t number;
    const uint8_t *payload = NULL;
    Py_ssize_t size = 0;
    int more;
    while ((more = next_len_field(&r, &number, &payload, &size)) > 0) { /* framing checked by count_fields */
        PyObject *item = NULL;
        switch (number) {
        case NODE_INPUT:
            if ((item = text(payload, size)) == NULL) goto done;
            PyTuple_SET_ITEM(inputs, n_in++, item);
            break;
        case NODE_OUTPUT:
            if ((item = text(payload, size)) == NULL) goto done;
            PyTuple_SET_ITEM(outputs, n_out++, item);
            break;
        case NODE_ATTRIBUTE:
            if ((item = PyBytes_FromStringAndSize((const char *)payload, size)) == NULL) goto done;
            PyTuple_SET_ITEM(attributes, n_attr++, item);
            break;
        case NODE_METADATA_PROPS:
            if ((item = entry(payload, size)) == NULL) goto done;
            PyTuple_SET_ITEM(metadata, n_meta++, item);
            break;
        case NODE_NAME:
            if (set_text(&name, payload, size) < 0) goto done;
            break;
        case NODE_OP_TYPE:
            if (set_symbol(symbols, &op_type, payload, size) < 0) goto done;
            break;
        case NODE_DOMAIN:
            if (set_symbol(symbols, &domain, payload, size) < 0) goto done;
            break;
        default: break;
        }
    }
    if (more < 0) goto done;
    if (op_type == NULL && (op_type = symbol(symbols, NOTHING, 0)) == NULL) goto done;
    if (domain == NULL && (domain = symbol(symbols, NOTHING, 0)) == NULL) goto done;
    if (name == NULL && (name = PyUnicode_New(0, 127)) == NULL) goto done;
    result = PyTuple_Pack(7, op_type, domain, name, inputs, outputs, attributes, metadata);
done:
    Py_XDECREF(op_type);
    Py_XDECREF(domain);
    Py_XDECREF(name);
    Py_XDECREF(inputs); /* a tuple left partly filled on failure is freed with its NULL slots */
    Py_XDECREF(outputs);
    Py_XDECREF(attributes);
    Py_XDECREF(metadata);
    return result;
}

static PyObject *decode_nodes(PyObject *module, PyObject *blobs) {
    (void)module;
    PyObject *iterator = PyObject_GetIter(blobs);
    if (iterator == NULL) return NULL;
    PyObject *out = PyList_New(0);
    Symbols symbols;
    memset(&symbols, 0, sizeof symbols);
    PyObject *blob;
    while (out != NULL && (blob = PyIter_Next(iterator)) != NULL) {
        char *data;
        Py_ssize_t size;
        PyObject *node = NULL;
        if (PyBytes_AsStringAndSize(blob, &data, &size) == 0) {
            node = decode_node((const uint8_t *)data, size, &symbols);
        } else {
            PyErr_Clear();
            malformed("a node is not bytes");
        }
        Py_DECREF(blob);
        if (node == NULL || PyList_Append(out, node) < 0) Py_CLEAR(out);
        Py_XDECREF(node);
    }
    Py_DECREF(iterator);
    clear_symbols(&symbols);
    if (out != NULL && PyErr_Occurred()) Py_CLEAR(out); /* the iterator failed */
    return out; /* a non-UTF-8 string raised UnicodeDecodeError, itself a ValueError */
}

static PyMethodDef methods[] = {
    {"decode_nodes", decode_nodes, METH_O,
     "decode_nodes(blobs) -> list of (op_type, domain, name, inputs, outputs, attributes, metadata)\n\n"
     "Each blob is one serialized onnx.NodeProto. ValueError for anything protobuf might read differently."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef moduledef = {
    PyModuleDef_HEAD_INIT,
    .m_name = "_nodewire",
    .m_doc = "onnx.NodeProto wire-format decoder (the ONNX loader's hot loop).",
    .m_size = -1,
    .m_methods = methods,
};

PyMODINIT_FUNC PyInit__nodewire(void) { return PyModule_Create(&moduledef); }
