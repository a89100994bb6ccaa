"""A model whose names, producer and doc strings are written to attack every output format.

Built from the Keras sample with the onnx API: the hostile text goes into every initializer name,
into the node names (so it becomes part of the block name, which every format prints), the
producer name and the doc strings; the file name carries markup and a line break too.
"""

from __future__ import annotations

from pathlib import Path

import onnx

SAMPLE = Path(__file__).resolve().parents[1] / "sample_models" / "keras_per_head.onnx"

# Markup, a script that would log to the console, an image that would make a request, code-span and
# table breakers, CR/LF followed by workflow commands, an encoded newline, ANSI and OSC escapes,
# a Markdown link and image, a SARIF placeholder, an entity, a Unicode line separator, length.
HOSTILE = ("<script>console.error('pwned')</script><img src=x onerror=console.error(1)>"
           "`a|b``|\r\n::error::pwned\n::add-mask::secret\r::stop-commands::tok\n"
           "\x1b[31m\x1b]0;title\x07[x](https:evil.example) ![i](https:evil.example/i.png) {0} %0A&amp;\u2028"
           + "L" * 3000)
FILE_NAME = "m<img src=x onerror=console.error(3)>`|\n::add-mask::x.onnx"


def write_hostile_model(folder: Path) -> Path:
    model = onnx.load(str(SAMPLE))
    renamed = {}
    for init in model.graph.initializer:
        renamed[init.name] = HOSTILE + init.name
        init.name = renamed[init.name]
    for node in model.graph.node:
        node.name = node.name.replace("multi_head_attention", "multi_head_attention" + HOSTILE)
        for i, name in enumerate(node.input):
            node.input[i] = renamed.get(name, name)
    model.producer_name = HOSTILE
    model.doc_string = HOSTILE
    model.graph.doc_string = HOSTILE
    path = folder / FILE_NAME
    path.write_bytes(model.SerializeToString())
    return path
