"""Training-step times of the catalog's models on this machine's GPU, for ``halyard calibrate``.

Each model the catalog names that PyTorch can build locally (torchvision's classifiers, the word
language model Gavel runs, and BERT/RoBERTa/GPT-2 through ``transformers`` when it is installed) is built
with random weights (nothing is downloaded), fed random inputs of the catalog's reference batch, and
timed for a whole training step (forward, backward, optimizer step) in two precisions: fp32 (PyTorch's
defaults: TF32 convolutions, fp32 matrix products) and AMP (bf16 autocast). The catalog's own figures
were measured in one of the two (its ``activation_bytes`` source says "AMP" or "fp32"); the report
compares like with like.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

TIMED_STEPS = 10  # after calibrate's warm-up calls
IMAGE_SIDE = 224  # ImageNet's crop, as every image model of the catalog trains
IMAGENET_CLASSES = 1000  # torchvision's classifiers' default head
ERROR_CHARS = 300  # of a failed model's error kept in the record
TORCHVISION = {  # catalog name -> torchvision builder
    "alexnet": "alexnet", "resnet18": "resnet18", "resnet50": "resnet50", "mobilenetv2": "mobilenet_v2",
    "mobilenetv3": "mobilenet_v3_small", "shufflenetv2": "shufflenet_v2_x1_0", "vgg11": "vgg11", "vgg16": "vgg16",
    "vgg19": "vgg19", "wide-resnet101-2": "wide_resnet101_2", "swint": "swin_t",
}
# The word language model of PyTorch's examples as Gavel runs it (emsize 200, nhid 200, 2 layers, untied,
# bptt 35) on Wikitext-2's 33,278 words: the catalog's `lstm` entry.
LSTM_VOCAB, LSTM_WIDTH, LSTM_LAYERS, LSTM_BPTT = 33_278, 200, 2, 35
TRANSFORMERS = {  # catalog name -> (config class, head class, config, sequence length), the catalog's shapes
    "bert-large": ("BertConfig", "BertForQuestionAnswering",
                   {"hidden_size": 1024, "num_hidden_layers": 24, "num_attention_heads": 16,
                    "intermediate_size": 4096}, 384),
    "roberta-base": ("RobertaConfig", "RobertaForMaskedLM", {"max_position_embeddings": 514}, 512),
    "gpt2-medium": ("GPT2Config", "GPT2LMHeadModel", {"n_embd": 1024, "n_layer": 24, "n_head": 16}, 1024),
}
PRECISIONS = ("fp32", "amp")


def catalog_precision(activation_source: str) -> str:
    """The precision the catalog's figures of a model were measured in, as its ``activation_bytes`` source
    says (Synergy's profiles ran apex AMP; Gavel, EasyScale and ElasticFlow fp32)."""
    return "amp" if "AMP" in activation_source else "fp32"


def buildable(names: list[str]) -> list[str]:
    """The catalog models among ``names`` that this module can build."""
    return [n for n in names if n in TORCHVISION or n in TRANSFORMERS or n == "lstm"]


def _model_and_step(torch, name: str, batch: int, device) -> tuple[Any, Callable[[], Any]]:
    """The model on ``device`` and a function computing its loss on a fixed random batch."""
    if name in TORCHVISION:
        import torchvision

        model = torchvision.models.get_model(TORCHVISION[name], weights=None).to(device)
        images = torch.randn(batch, 3, IMAGE_SIDE, IMAGE_SIDE, device=device)
        labels = torch.randint(0, IMAGENET_CLASSES, (batch,), device=device)
        return model, lambda: torch.nn.functional.cross_entropy(model(images), labels)
    if name == "lstm":

        class WordLanguageModel(torch.nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.encoder = torch.nn.Embedding(LSTM_VOCAB, LSTM_WIDTH)
                self.rnn = torch.nn.LSTM(LSTM_WIDTH, LSTM_WIDTH, LSTM_LAYERS)
                self.decoder = torch.nn.Linear(LSTM_WIDTH, LSTM_VOCAB)

            def forward(self, tokens):
                output, _ = self.rnn(self.encoder(tokens))
                return self.decoder(output)

        model = WordLanguageModel().to(device)
        tokens = torch.randint(0, LSTM_VOCAB, (LSTM_BPTT, batch), device=device)
        targets = torch.randint(0, LSTM_VOCAB, (LSTM_BPTT * batch,), device=device)
        return model, lambda: torch.nn.functional.cross_entropy(model(tokens).view(-1, LSTM_VOCAB), targets)
    import transformers

    config_class, head_class, shape, tokens = TRANSFORMERS[name]
    config = getattr(transformers, config_class)(**shape)
    model = getattr(transformers, head_class)(config).to(device)
    ids = torch.randint(0, config.vocab_size, (batch, tokens), device=device)
    if head_class == "BertForQuestionAnswering":
        positions = torch.randint(0, tokens, (batch,), device=device)
        return model, lambda: model(input_ids=ids, start_positions=positions, end_positions=positions).loss
    return model, lambda: model(input_ids=ids, labels=ids).loss


def time_training_step(torch, name: str, batch: int, precision: str) -> dict[str, Any]:
    """Seconds per training step of catalog model ``name`` at per-GPU ``batch`` on ``cuda:0``, and its
    parameters and peak memory."""
    from halyard.cli.calibrate import timed

    device = torch.device("cuda:0")
    torch.backends.cudnn.benchmark = True
    model, loss_of = _model_and_step(torch, name, batch, device)
    adam = name in TRANSFORMERS  # the transformers fine-tune with Adam(W); the others train with SGD + momentum
    optimizer = (torch.optim.AdamW(model.parameters(), lr=1e-5) if adam
                 else torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9))

    def step() -> None:
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=precision == "amp"):
            loss = loss_of()
        loss.backward()
        optimizer.step()

    torch.cuda.reset_peak_memory_stats(device)
    return {"model": name, "batch": batch, "precision": precision, "step_s": timed(torch, step, TIMED_STEPS),
            "parameters": sum(p.numel() for p in model.parameters()),
            "peak_memory_gib": torch.cuda.max_memory_allocated(device) / 2**30,
            "optimizer": "AdamW" if adam else "SGD+momentum"}


def measure_models(names: list[str], batches: dict[str, int], log: Callable[[str], None]) -> list[dict[str, Any]]:
    """Every model of ``names`` in both precisions; a model that fails (a missing package, out of memory) is
    recorded with its error, and the rest still run."""
    import torch

    rows = []
    for name in names:
        for precision in PRECISIONS:
            try:
                row = time_training_step(torch, name, batches[name], precision)
            except Exception as exc:  # one model's failure must not lose the others' measurements
                row = {"model": name, "batch": batches[name], "precision": precision,
                       "error": f"{type(exc).__name__}: {exc}"[:ERROR_CHARS]}
            torch.cuda.empty_cache()  # the model's memory, free once its step's function returned
            rows.append(row)
            log(f"{name} bs{batches[name]} {precision}: "
                + (f"{row['step_s'] * 1e3:.2f} ms" if "step_s" in row else row["error"]))
    return rows
