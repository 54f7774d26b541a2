"""Models people bring: real architectures from Hugging Face `transformers`, built locally from
their configs with seeded random weights (nothing is downloaded), in eval mode.

Each entry names a model family, builds it at a "small" size (tests: a few layers, narrow) or a
"bench" size (the published width and resolution or sequence length; depth shrunk where a 2-core
run would take minutes), and returns the module wrapped so that it takes tensors and returns one
tensor (the last hidden state, or the image features), which is what `import_model` and the
runtimes we compare with (ONNX Runtime, OpenVINO) all accept.

    from uol_core.graph.hf_zoo import build, HF_MODELS
    module, inputs = build("bert", "small", batch=1)

`transformers` is an optional extra (`pip install -e .[models]`, installed by `make install`);
without it `available()` says why and the builders raise `ModelsMissing`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

SMALL, BENCH = "small", "bench"


class ModelsMissing(RuntimeError):
    """`transformers` is not installed: the library zoo needs the `[models]` extra."""


def available() -> str | None:
    """None when the library zoo can be built, else the reason it cannot."""
    try:
        import transformers  # noqa: F401  (only its presence is checked)
    except ImportError:
        return "transformers is not installed (pip install -e '.[models]')"
    return None


class Features(nn.Module):
    """A library model as a function of tensors to one tensor: the output a downstream head
    reads (last_hidden_state, else pooled features), so export and the peers see one output."""

    def __init__(self, model: nn.Module, input_names: tuple[str, ...]) -> None:
        super().__init__()
        self.model, self.input_names = model, input_names

    def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
        out = self.model(**dict(zip(self.input_names, inputs, strict=True)))
        hidden = getattr(out, "last_hidden_state", None)
        return hidden if hidden is not None else out[0]


@dataclass(frozen=True)
class HfModel:
    """One library model: how to build its config at a size, which class, and its inputs."""

    family: str                                   # what a user would call it: "ResNet-50"
    config: Callable[[str], object]               # size -> transformers config
    model_class: str                              # attribute of transformers
    inputs: Callable[[int, str, object], tuple[tuple[str, torch.Tensor], ...]]


def _image(side_small: int, side_bench: int, channels: int = 3):
    def make(batch: int, size: str, config) -> tuple[tuple[str, torch.Tensor], ...]:
        side = side_small if size == SMALL else side_bench
        return (("pixel_values", torch.randn(batch, channels, side, side)),)
    return make


def _tokens(seq_small: int, seq_bench: int):
    def make(batch: int, size: str, config) -> tuple[tuple[str, torch.Tensor], ...]:
        seq = seq_small if size == SMALL else seq_bench
        return (("input_ids", torch.randint(0, config.vocab_size, (batch, seq))),)
    return make


def _audio(frames_small: int, frames_bench: int):
    def make(batch: int, size: str, config) -> tuple[tuple[str, torch.Tensor], ...]:
        frames = frames_small if size == SMALL else frames_bench
        return (("input_features", torch.randn(batch, config.num_mel_bins, frames)),)
    return make


def _cfg(name: str, small: dict, bench: dict) -> Callable[[str], object]:
    def make(size: str):
        import transformers

        return getattr(transformers, name)(**(small if size == SMALL else bench))
    return make


# Bench sizes keep each family's published width, heads and resolution; depth is cut to what a
# 2-core host runs in seconds (the "shrink depth, not width").
HF_MODELS: dict[str, HfModel] = {
    "resnet50": HfModel("ResNet-50", _cfg(
        "ResNetConfig",
        dict(embedding_size=16, hidden_sizes=[32, 64, 128, 256], depths=[1, 1, 1, 1], layer_type="bottleneck"),
        dict(embedding_size=64, hidden_sizes=[256, 512, 1024, 2048], depths=[1, 1, 2, 1],
             layer_type="bottleneck")),
        "ResNetModel", _image(32, 224)),
    "mobilenet_v2": HfModel("MobileNetV2", _cfg(
        "MobileNetV2Config", dict(depth_multiplier=0.35, image_size=32), dict(image_size=224)),
        "MobileNetV2Model", _image(32, 224)),
    "efficientnet_b0": HfModel("EfficientNet-B0", _cfg(
        "EfficientNetConfig", dict(image_size=32, width_coefficient=0.25, depth_coefficient=0.2, hidden_dim=320),
        # the config's defaults are B7's; B0 is width and depth 1.0 at 224 px
        dict(image_size=224, width_coefficient=1.0, depth_coefficient=1.0, hidden_dim=1280)),
        "EfficientNetModel", _image(32, 224)),
    "convnext_t": HfModel("ConvNeXt-T", _cfg(
        "ConvNextConfig", dict(hidden_sizes=[16, 32, 64, 128], depths=[1, 1, 1, 1]),
        dict(hidden_sizes=[96, 192, 384, 768], depths=[1, 1, 3, 1])),
        "ConvNextModel", _image(32, 224)),
    "vit_b16": HfModel("ViT-B/16", _cfg(
        "ViTConfig", dict(hidden_size=64, num_hidden_layers=1, num_attention_heads=4,
                          intermediate_size=128, image_size=32, patch_size=8),
        dict(num_hidden_layers=2)),
        "ViTModel", _image(32, 224)),
    "swin_t": HfModel("Swin-T", _cfg(
        "SwinConfig", dict(image_size=32, patch_size=2, embed_dim=16, depths=[1, 1], num_heads=[2, 4],
                           window_size=4),
        dict(depths=[2, 2, 2, 2])),
        "SwinModel", _image(32, 224)),
    "mobilevit": HfModel("MobileViT (CNN + transformer)", _cfg(
        "MobileViTConfig", dict(image_size=64, hidden_sizes=[32, 48, 64], neck_hidden_sizes=[
            8, 16, 24, 32, 40, 48, 96]),
        dict(image_size=256)),
        "MobileViTModel", _image(64, 256)),
    "gpt2": HfModel("GPT-2", _cfg(
        "GPT2Config", dict(n_embd=64, n_layer=1, n_head=4, vocab_size=512, n_positions=64, bos_token_id=0,
             eos_token_id=0),
        dict(n_layer=2)),
        "GPT2Model", _tokens(16, 128)),
    "bert_base": HfModel("BERT-base", _cfg(
        "BertConfig", dict(hidden_size=64, num_hidden_layers=1, num_attention_heads=4,
                           intermediate_size=128, vocab_size=512, max_position_embeddings=64),
        dict(num_hidden_layers=2)),
        "BertModel", _tokens(16, 128)),
    "llama": HfModel("Llama (GQA + RoPE)", _cfg(
        "LlamaConfig", dict(hidden_size=64, intermediate_size=128, num_hidden_layers=1,
                            num_attention_heads=4, num_key_value_heads=2, vocab_size=512,
                            max_position_embeddings=64),
        dict(hidden_size=2048, intermediate_size=5632, num_hidden_layers=1, num_attention_heads=32,
             num_key_value_heads=4, vocab_size=32000, max_position_embeddings=2048)),
        "LlamaModel", _tokens(16, 128)),
    "t5_encoder": HfModel("T5 encoder", _cfg(
        "T5Config", dict(d_model=64, d_ff=128, d_kv=16, num_layers=1, num_heads=4, vocab_size=512),
        dict(d_model=512, d_ff=2048, d_kv=64, num_layers=2, num_heads=8)),
        "T5EncoderModel", _tokens(16, 128)),
    "whisper_encoder": HfModel("Whisper encoder", _cfg(
        "WhisperConfig", dict(d_model=64, encoder_layers=1, encoder_attention_heads=4,
                              encoder_ffn_dim=128, num_mel_bins=16, max_source_positions=16,
                              decoder_layers=1, decoder_attention_heads=4, decoder_ffn_dim=128,
                              vocab_size=512, pad_token_id=0, bos_token_id=0, eos_token_id=0,
                              decoder_start_token_id=0),
        dict(d_model=384, encoder_layers=2, encoder_attention_heads=6, encoder_ffn_dim=1536,
             num_mel_bins=80, max_source_positions=1500)),
        "WhisperEncoderOnly", _audio(32, 3000)),
}


def _model(entry: HfModel, config) -> nn.Module:
    import transformers

    if entry.model_class == "WhisperEncoderOnly":  # the encoder alone, as speech models deploy it
        return transformers.WhisperModel(config).get_encoder()
    return getattr(transformers, entry.model_class)(config)


def build(name: str, size: str = BENCH, batch: int = 1, seed: int = 0
          ) -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    """One library model in eval mode with seeded random weights, and seeded example inputs."""
    if name not in HF_MODELS:
        raise KeyError(f"unknown library model '{name}' (one of: {', '.join(HF_MODELS)})")
    reason = available()
    if reason:
        raise ModelsMissing(reason)
    entry = HF_MODELS[name]
    torch.manual_seed(seed)
    config = entry.config(size)
    model = _model(entry, config).eval()
    with torch.no_grad():  # batch norms get non-trivial statistics, so folding them is tested
        for m in model.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.normal_(0, 0.1)
                m.running_var.uniform_(0.5, 1.5)
    named = entry.inputs(batch, size, config)
    return Features(model, tuple(n for n, _ in named)).eval(), tuple(t for _, t in named)


__all__ = ["BENCH", "HF_MODELS", "SMALL", "HfModel", "ModelsMissing", "available", "build"]
