"""Keras on TensorFlow, torch or JAX: the Keras models of keras_models.py exported to ONNX by
Keras' own ``model.export(format="onnx")``, which hands the model to tf2onnx (TensorFlow),
torch.onnx (torch: the dynamo exporter for the fixed shapes given here; ``torchscript``: the
model's own signature with a dynamic batch, which Keras exports by TorchScript tracing) or
jax2onnx (JAX), each with its int8 copy. The torch run also saves each model
as a .keras archive (tests/data/toolchains/keras/, the same truth): the archive does not depend on
the backend.

Run in an environment with keras, keras-hub, the backend, its converter and onnxruntime:
    python scripts/toolchains/make_keras.py tensorflow|torch|torchscript|jax [NAME ...]
"""

from __future__ import annotations

import os
import shutil
import sys
from typing import Any

TOOLCHAINS = {"tensorflow": "keras-tf2onnx", "torch": "keras-torch", "torchscript": "keras-torchscript",
              "jax": "keras-jax2onnx"}
CONVERTERS = {"tensorflow": ("tensorflow", "tf2onnx"), "torch": ("torch",), "torchscript": ("torch",),
              "jax": ("jax", "jax2onnx")}


def signature(built: Any) -> list[Any]:
    """The example batch's fixed shapes as the export's input signature, in the structure the model
    is called with. Fixed shapes: Keras on torch then takes torch's dynamo exporter (with a dynamic
    axis it falls back to TorchScript tracing, which cannot trace keras-hub's embeddings)."""
    import keras

    specs = [keras.InputSpec(shape=x.shape, dtype=str(x.dtype), name=t.name)
             for t, x in zip(built.model.inputs, built.inputs)]
    if isinstance(built.model.input, dict):
        return [{s.name: s for s in specs}]
    return [specs] if len(specs) > 1 else specs


def export(built: Any, path: str, dynamic_batch: bool = False) -> None:
    """Keras' ONNX export, with the example's fixed shapes; ``dynamic_batch``: the model's own
    signature (batch None), which sends Keras on torch to TorchScript tracing."""
    if dynamic_batch:
        built.model.export(path, format="onnx", verbose=False)
    else:
        built.model.export(path, format="onnx", verbose=False, input_signature=signature(built))


def main(argv: list[str]) -> None:
    if len(argv) < 2 or argv[1] not in TOOLCHAINS:
        raise SystemExit(f"usage: {argv[0]} {'|'.join(TOOLCHAINS)} [NAME ...]")
    choice = argv[1]
    backend = "torch" if choice == "torchscript" else choice
    os.environ["KERAS_BACKEND"] = backend
    from common import clear_failure, only, out_dir, record_failure, versions, write
    from keras_models import MODELS, build, truth

    toolchain = TOOLCHAINS[choice]
    made_with = versions("keras", "keras-hub", *CONVERTERS[choice], "onnxruntime")
    wanted = only(argv[1:])
    for seed, name in enumerate(MODELS):
        if wanted and name not in wanted:
            continue
        path = out_dir(toolchain) / f"{name}.onnx"
        try:  # building calls the model once on the backend: a backend may refuse it already
            built = build(name, seed)
            blocks, total = truth(built)
            export(built, str(path), dynamic_batch=choice == "torchscript")
        except Exception as exc:  # a converter that cannot take the model: recorded, the others go on
            record_failure(toolchain, name, exc)
            continue
        clear_failure(toolchain, name)
        if any(path.parent.glob(f"{name}.onnx.data")):
            raise SystemExit(f"{path}: the export wrote external data; keep the fixtures self-contained")
        write(toolchain, name, path, source=built.source, blocks=blocks, total=total, versions=made_with)
        if choice == "torch":
            keras_path = out_dir("keras") / f"{name}.keras"
            built.model.save(str(keras_path))
            shutil.copy(path.with_suffix(".json"), keras_path.with_suffix(".json"))


if __name__ == "__main__":
    main(sys.argv)
