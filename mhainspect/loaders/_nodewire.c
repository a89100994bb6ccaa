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
#define MAX_FIELD_NUMBER 536870911 /* 2^29 - 1 */

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
            if (i == MAX_VARINT_BYTES - 1 && byte > 1) return -1; /* more than 64 bits */
            *out = value;
            return 0;
        }
    }
    return -1;
}

/* The next field's number and wire type; for WIRE_LEN also its payload [*start, *start + *len). */
static int read_field(Reader *r, uint32_t *number, int *wire, const uint8_t **start, Py_ssize_t *len) {
    uint64_t key;
    if (read_varint(r, &key) < 0) return -1;
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
        if (read_varint(r, &skip) < 0) return -1;
        if (skip > (uint64_t)(r->end - r->pos)) return -1;
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

/* A str from UTF-8 bytes; NULL with ValueError (UnicodeDecodeError) when they are not UTF-8. */
static PyObject *text(const uint8_t *start, Py_ssize_t len) {
    return PyUnicode_DecodeUTF8((const char *)start, len, NULL);
}

/* Replace *slot (a singular field: the last occurrence wins, as in protobuf). */
static int set_text(PyObject **slot, const uint8_t *start, Py_ssize_t len) {
    PyObject *value = text(start, len);
    if (value == NULL) return -1;
    Py_XSETREF(*slot, value);
    return 0;
}

static int append_text(PyObject *list, const uint8_t *start, Py_ssize_t len) {
    PyObject *value = text(start, len);
    if (value == NULL) return -1;
    int rc = PyList_Append(list, value);
    Py_DECREF(value);
    return rc;
}

static int append_bytes(PyObject *list, const uint8_t *start, Py_ssize_t len) {
    PyObject *value = PyBytes_FromStringAndSize((const char *)start, len);
    if (value == NULL) return -1;
    int rc = PyList_Append(list, value);
    Py_DECREF(value);
    return rc;
}

/* One StringStringEntryProto appended to list as (key, value). */
static int append_entry(PyObject *list, const uint8_t *start, Py_ssize_t len) {
    Reader r = {start, start + len};
    PyObject *key = NULL, *value = NULL;
    while (r.pos < r.end) {
        uint32_t number;
        int wire;
        const uint8_t *payload = NULL;
        Py_ssize_t size = 0;
        if (read_field(&r, &number, &wire, &payload, &size) < 0) {
            malformed("bad metadata_props entry");
            goto fail;
        }
        if (wire != WIRE_LEN) continue;
        if (number == ENTRY_KEY) {
            if (set_text(&key, payload, size) < 0) goto fail;
        } else if (number == ENTRY_VALUE) {
            if (set_text(&value, payload, size) < 0) goto fail;
        }
    }
    if (key == NULL) key = PyUnicode_FromStringAndSize("", 0);
    if (value == NULL) value = PyUnicode_FromStringAndSize("", 0);
    if (key == NULL || value == NULL) goto fail;
    PyObject *pair = PyTuple_Pack(2, key, value);
    Py_DECREF(key);
    Py_DECREF(value);
    if (pair == NULL) return -1;
    int rc = PyList_Append(list, pair);
    Py_DECREF(pair);
    return rc;
fail:
    Py_XDECREF(key);
    Py_XDECREF(value);
    return -1;
}

/* op_type and domain repeat on every node: interned, so later comparisons and lookups are by identity. */
static int set_interned(PyObject **slot, const uint8_t *start, Py_ssize_t len) {
    if (set_text(slot, start, len) < 0) return -1;
    PyUnicode_InternInPlace(slot);
    return 0;
}

static PyObject *decode_node(const uint8_t *start, Py_ssize_t len) {
    Reader r = {start, start + len};
    PyObject *op_type = NULL, *domain = NULL, *name = NULL;
    PyObject *inputs = PyList_New(0), *outputs = PyList_New(0), *attributes = PyList_New(0);
    PyObject *metadata = PyList_New(0);
    PyObject *result = NULL;
    if (inputs == NULL || outputs == NULL || attributes == NULL || metadata == NULL) goto done;
    while (r.pos < r.end) {
        uint32_t number;
        int wire;
        const uint8_t *payload = NULL;
        Py_ssize_t size = 0;
        if (read_field(&r, &number, &wire, &payload, &size) < 0) {
            malformed("truncated or malformed field");
            goto done;
        }
        if (wire != WIRE_LEN) continue; /* every field read here is length-delimited */
        int rc = 0;
        switch (number) {
        case NODE_INPUT: rc = append_text(inputs, payload, size); break;
        case NODE_OUTPUT: rc = append_text(outputs, payload, size); break;
        case NODE_NAME: rc = set_text(&name, payload, size); break;
        case NODE_OP_TYPE: rc = set_interned(&op_type, payload, size); break;
        case NODE_ATTRIBUTE: rc = append_bytes(attributes, payload, size); break;
        case NODE_DOMAIN: rc = set_interned(&domain, payload, size); break;
        case NODE_METADATA_PROPS: rc = append_entry(metadata, payload, size); break;
        case NODE_DEVICE_CONFIGURATIONS:
            malformed("device_configurations is left to protobuf");
            rc = -1;
            break;
        default: break; /* doc_string, overload, unknown fields: never read */
        }
        if (rc < 0) goto done;
    }
    if (op_type == NULL && (op_type = PyUnicode_InternFromString("")) == NULL) goto done;
    if (domain == NULL && (domain = PyUnicode_InternFromString("")) == NULL) goto done;
    if (name == NULL && (name = PyUnicode_FromStringAndSize("", 0)) == NULL) goto done;
    {
        PyObject *in_t = PyList_AsTuple(inputs), *out_t = PyList_AsTuple(outputs);
        PyObject *attr_t = PyList_AsTuple(attributes), *meta_t = PyList_AsTuple(metadata);
        if (in_t && out_t && attr_t && meta_t) {
            result = PyTuple_Pack(7, op_type, domain, name, in_t, out_t, attr_t, meta_t);
        }
        Py_XDECREF(in_t);
        Py_XDECREF(out_t);
        Py_XDECREF(attr_t);
        Py_XDECREF(meta_t);
    }
done:
    Py_XDECREF(op_type);
    Py_XDECREF(domain);
    Py_XDECREF(name);
    Py_XDECREF(inputs);
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
    PyObject *blob;
    while (out != NULL && (blob = PyIter_Next(iterator)) != NULL) {
        char *data;
        Py_ssize_t size;
        PyObject *node = NULL;
        if (PyBytes_AsStringAndSize(blob, &data, &size) == 0) {
            node = decode_node((const uint8_t *)data, size);
        } else {
            PyErr_Clear();
            malformed("a node is not bytes");
        }
        Py_DECREF(blob);
        if (node == NULL || PyList_Append(out, node) < 0) Py_CLEAR(out);
        Py_XDECREF(node);
    }
    Py_DECREF(iterator);
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
