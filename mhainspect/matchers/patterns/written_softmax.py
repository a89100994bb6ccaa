"""A softmax written out (no Softmax op): Exp(x − ReduceLogSumExp(x)), as Keras writes a softmax over
several attention axes, or Exp(x [− ReduceMax(x)]) divided by its ReduceSum. Read as the Softmax
node it computes, so the softmax patterns match it as they match a Softmax."""

from __future__ import annotations

from mhainspect.ir.dataflow import GraphIndex
from mhainspect.ir.graph import Node
from mhainspect.matchers.patterns import AnchorView

_NORMALISERS = {"ReduceLogSumExp", "ReduceMax"}


def written_softmax(index: GraphIndex, exp: Node) -> Node | None:
    """A softmax written out, as the Softmax node it computes (named as the Exp, reading the scores,
    making the normalised probabilities), or None: Exp(x − ReduceLogSumExp(x)) (Keras over several
    attention axes, where no Softmax op normalises them at once), or Exp(x [− ReduceMax(x)]) divided
    by its ReduceSum."""
    if exp.op != "Exp" or not exp.inputs or not exp.inputs[0] or not exp.outputs or not exp.outputs[0]:
        return None
    scores = exp.inputs[0]
    sub = index.producer.get(index.value_source(scores))
    if sub is not None and sub.op == "Sub" and len(sub.inputs) == 2:
        red = index.producer.get(index.value_source(sub.inputs[1]))
        if red is not None and red.op in _NORMALISERS and red.inputs \
                and index.value_source(red.inputs[0]) == index.value_source(sub.inputs[0]):
            if red.op == "ReduceLogSumExp":
                return Node(exp.name, "Softmax", (sub.inputs[0],), (exp.outputs[0],))
            scores = sub.inputs[0]
    for user, pos in index.value_users(exp.outputs[0]):
        if user.op != "Div" or pos != 0 or len(user.inputs) != 2 or not user.outputs:
            continue
        red = index.producer.get(index.value_source(user.inputs[1]))
        if red is not None and red.op == "ReduceSum" and red.inputs \
                and index.value_source(red.inputs[0]) == index.value_source(exp.outputs[0]):
            return Node(exp.name, "Softmax", (scores,), (user.outputs[0],))
    return None


VIEW = AnchorView("written softmax", frozenset({"Exp"}), written_softmax)
