"""Model names of published traces -> model names of the performance model's catalog.

Traces that name their models use their own names (``gpt2``, ``ResNet-50``,
``yolov3``, ...). Each is mapped to a catalog model (``emulator/data/models.toml``;
``tests/test_traces_models.py`` checks that every target exists there). Where the
catalog has the model it is an *exact* mapping; otherwise a *stand-in* of the
same kind is used, chosen by the gradient volume that the performance model's
communication cost depends on, and the reason is recorded here. The trace's
own name is always kept in ``JobSpec.extra``. ``docs/trace-format.md`` prints
these tables.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType


@dataclass(frozen=True, slots=True)
class ModelMapping:
    model: str  # catalog name
    exact: bool
    why: str


def _table(entries: dict[str, ModelMapping]) -> Mapping[str, ModelMapping]:
    return MappingProxyType(entries)


# ElasticFlow/ITP annotated traces (microsoft/elasticflow-traces README: model_name).
ITP_MODELS = _table({
    "resnet50": ModelMapping("resnet50", True, "same model"),
    "vgg16": ModelMapping("vgg11", False, "the catalog's VGG (133 M vs 138 M parameters)"),
    "inception3": ModelMapping("resnet50", False, "ImageNet CNN of the same size (24 M vs 26 M parameters)"),
    "bert": ModelMapping("bert-large", False, "the catalog's BERT"),
    "deepspeech2": ModelMapping("deepspeech", True, "DeepSpeech2 (deepspeech.pytorch)"),
    "gpt2": ModelMapping("transformer-xl", False, "transformer language model (GPT-2 124 M, Transformer-XL 192 M)"),
})

# Gavel job types (stanford-futuredata/gavel scheduler/job_table.py), without " (batch size N)".
GAVEL_MODELS = _table({
    "ResNet-50": ModelMapping("resnet50", True, "same model"),
    "ResNet-18": ModelMapping("resnet18", True, "same architecture (Gavel trains it on CIFAR-10)"),
    "Transformer": ModelMapping("transformer-xl", False, "the catalog's transformer (Gavel's is a "
                                                          "translation Transformer on Multi30k)"),
    "LM": ModelMapping("lstm", True, "the PyTorch word_language_model LSTM that Gavel runs"),
    "Recommendation": ModelMapping("resnet50", False, "gradient volume: Gavel's ML-20M autoencoder has "
                                                       "about 25 M parameters"),
    "CycleGAN": ModelMapping("resnet50", False, "gradient volume: about 28 M parameters"),
    "A3C": ModelMapping("m5", False, "gradient volume: a small Atari network, about 1 M parameters"),
})

# Pollux workloads (petuum/adaptdl osdi21-artifact simulator/applications.py).
POLLUX_MODELS = _table({
    "cifar10": ModelMapping("resnet18", True, "ResNet-18 (Pollux trains it on CIFAR-10)"),
    "imagenet": ModelMapping("resnet50", True, "ResNet-50 on ImageNet"),
    "deepspeech2": ModelMapping("deepspeech", True, "DeepSpeech2"),
    "bert": ModelMapping("bert-large", False, "the catalog's BERT (Pollux fine-tunes BERT-base)"),
    "yolov3": ModelMapping("alexnet", False, "gradient volume: YOLOv3 has 62 M parameters, AlexNet 61 M"),
    "ncf": ModelMapping("shufflenetv2", False, "gradient volume: a small NeuMF model, a few M parameters"),
})

MODEL_TABLES: Mapping[str, Mapping[str, ModelMapping]] = MappingProxyType({
    "itp-annotated": ITP_MODELS,
    "gavel": GAVEL_MODELS,
    "pollux": POLLUX_MODELS,
})
