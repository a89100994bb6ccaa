"""Typed node attributes (mhainspect.ir.graph.Attrs): a getter gives the attribute when it has the
asked type, else the default; attributes are read-only; a plain mapping given to a Node is wrapped."""

from __future__ import annotations

import pickle

import pytest

from mhainspect.ir.graph import NO_ATTRS, Attrs, Node


def test_getters_give_the_typed_value_or_the_default() -> None:
    a = Attrs({"axis": -1, "perm": (0, 2, 1, 3), "alpha": 0.125, "equation": "bhqd,bhkd->bhqk",
               "scales": (1.0, 2), "value": 0.0, "axes": (0, 1.5)})
    assert a.int("axis", 0) == -1 and a.int("missing", 7) == 7 and a.int("missing") is None
    assert a.ints("perm") == (0, 2, 1, 3) and a.ints("axes") is None  # a float inside: not ints
    assert a.float("alpha", 1.0) == 0.125 and a.float("axis") == -1.0 and a.float("missing", 1.0) == 1.0
    assert a.floats("scales") == (1.0, 2.0) and a.floats("equation") is None
    assert a.str("equation") == "bhqd,bhkd->bhqk" and a.str("axis", "?") == "?"
    assert a.tensor("value") == 0.0 and a.tensor("perm") is None


def test_an_attribute_of_another_type_is_as_if_absent() -> None:
    """A hostile file may write axis as a string or a list: the default, never a crash."""
    a = Attrs({"axis": "two", "perm": 3, "transB": (1,)})
    assert a.int("axis", 0) == 0 and a.ints("perm") is None and a.int("transB", 0) == 0


def test_attributes_are_read_only_and_pickle_by_value() -> None:
    a = Attrs({"axis": 1})
    with pytest.raises(TypeError):
        a["axis"] = 2
    with pytest.raises(TypeError):
        a.update(axis=3)
    with pytest.raises(TypeError):
        NO_ATTRS.setdefault("axis", 1)
    assert not NO_ATTRS and pickle.loads(pickle.dumps(a)) == a and type(pickle.loads(pickle.dumps(a))) is Attrs


def test_a_node_given_a_plain_mapping_holds_typed_attributes() -> None:
    n = Node("t", "Transpose", ("x",), ("y",), {"perm": (1, 0)})  # type: ignore[arg-type]
    assert type(n.attrs) is Attrs and n.attrs.ints("perm") == (1, 0)
    assert Node("r", "Relu", ("x",), ("y",)).attrs is NO_ATTRS
