"""Every decoder-LLM family of keras-hub 0.32.0, and the encoder and vision
families whose backbone has Dense/attention weights, as a tiny random
config (issue 27): ``FAMILIES[name] = (task class, backbone class, backbone
kwargs)``; ``KINDS[name]`` says what the task reads and predicts
(``causal_lm`` unless listed); ``DERIVE_ONLY[name] = (backbone class,
kwargs, why it is not trained)``: a derived map is checked, no training.

The list is every ``CausalLM`` subclass of keras-hub 0.32.0: the text
decoders, Gemma3n text-only (its vision and audio encoders are optional),
and the vision-language ones (``pali_gemma``, ``blip2`` with its OPT
language model, ``parseq``: ``kind`` ``vision_causal_lm``, their
sub-models built from ``Part``s). Left out, with why:
``Gemma4AssistantCausalLM`` (Gemma4's backbone, covered by ``gemma4``),
``SmolLMCausalLM`` (an alias of ``SmolLM3CausalLM``), ``Qwen2CausalLM``
(``Qwen2Backbone`` is ``QwenBackbone``, covered by ``qwen``). Every
config: 2 layers, hidden 32, 8 query heads and 2
key/value heads (grouped-query: 2 divides neither model axis of 4 nor 8),
4 experts where there are experts (divides 4, not 8). Encoders: 2 layers,
hidden 32, 8 heads, a 4-class classifier task; vision: 16x16 images in
4x4 patches. Left out of the encoders, with why: ``t5``, ``bart``,
``whisper``, ``moonshine``, ``t5gemma`` (encoder-decoder ``Seq2SeqLM``s, not
run here), ``siglip``, ``clip``, ``metaclip_2`` (two-tower backbones with no
task that trains them in keras-hub 0.32.0), ``swin_transformer``,
``vit_det``, ``segformer``, ``mit`` (windowed or convolutional attention
backbones, not derived here).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Part:
    """A sub-model a backbone takes as an argument (BLIP-2's encoders and
    language model, PARSeq's image encoder): ``keras_hub.models.<cls>(**kwargs)``,
    built afresh with each backbone (under the build's distribution scope)."""

    cls: str
    kwargs: dict


def build_backbone(backbone_name: str, /, **kwargs: Any) -> Any:
    """``keras_hub.models.<backbone_name>(**kwargs)``, each ``Part`` built first."""
    import keras_hub

    parts = {k: getattr(keras_hub.models, v.cls)(**v.kwargs)
             for k, v in kwargs.items() if isinstance(v, Part)}
    return getattr(keras_hub.models, backbone_name)(**(kwargs | parts))


def backbone_builder(backbone_name: str):
    """A callable taking the backbone's kwargs (for ``keras_layout.abstract_model``)."""
    return functools.partial(build_backbone, backbone_name)


VOCAB = 64
HIDDEN = 32
GQA = dict(vocabulary_size=VOCAB, num_layers=2, num_query_heads=8, num_key_value_heads=2,
           hidden_dim=HIDDEN, intermediate_dim=64)
MHA = dict(vocabulary_size=VOCAB, num_layers=2, num_heads=8, hidden_dim=HIDDEN,
           intermediate_dim=64)
FAMILIES = {
    "bloom": ("BloomCausalLM", "BloomBackbone", dict(MHA, dropout=0.0)),
    "falcon": ("FalconCausalLM", "FalconBackbone",
               dict(vocabulary_size=VOCAB, num_layers=2, num_attention_heads=8,
                    hidden_dim=HIDDEN, intermediate_dim=64)),
    "gemma": ("GemmaCausalLM", "GemmaBackbone", dict(GQA, head_dim=4)),
    "gemma3": ("Gemma3CausalLM", "Gemma3Backbone",
               dict(GQA, head_dim=4, image_size=16, vision_encoder=None)),
    "gemma4": ("Gemma4CausalLM", "Gemma4Backbone", dict(GQA, head_dim=4, image_size=16)),
    "gpt2": ("GPT2CausalLM", "GPT2Backbone", dict(MHA, dropout=0.0, max_sequence_length=16)),
    # rotary_percentage 0.5: the default 0.25 of head_dim 4 rotates 1 dim,
    # which keras-hub's RotaryEmbedding refuses on JAX ("must be even").
    "gpt_neox": ("GPTNeoXCausalLM", "GPTNeoXBackbone",
                 dict(MHA, dropout=0.0, max_sequence_length=16, rotary_percentage=0.5)),
    "gpt_oss": ("GptOssCausalLM", "GptOssBackbone",
                dict(GQA, num_experts=4, top_k=2, head_dim=4)),
    "llama": ("LlamaCausalLM", "LlamaBackbone", GQA),
    "llama3": ("Llama3CausalLM", "Llama3Backbone", GQA),
    "mistral": ("MistralCausalLM", "MistralBackbone", dict(GQA, head_dim=4)),
    "mixtral": ("MixtralCausalLM", "MixtralBackbone", dict(GQA, num_experts=4, top_k=2)),
    "opt": ("OPTCausalLM", "OPTBackbone", dict(MHA, dropout=0.0, max_sequence_length=16)),
    "phi3": ("Phi3CausalLM", "Phi3Backbone", GQA),
    "qwen": ("QwenCausalLM", "QwenBackbone", GQA),
    "qwen3": ("Qwen3CausalLM", "Qwen3Backbone", dict(GQA, head_dim=4)),
    "qwen3_5": ("Qwen3_5CausalLM", "Qwen3_5Backbone",
                dict(GQA, head_dim=4, linear_num_key_heads=4, linear_num_value_heads=8,
                     linear_key_head_dim=4, linear_value_head_dim=4)),
    "qwen3_5_moe": ("Qwen3_5MoeCausalLM", "Qwen3_5MoeBackbone",
                    dict(vocabulary_size=VOCAB, num_layers=2, num_query_heads=8,
                         num_key_value_heads=2, hidden_dim=HIDDEN, head_dim=4,
                         moe_intermediate_dim=16, shared_expert_intermediate_size=16,
                         num_experts=4, top_k=2, linear_num_key_heads=4,
                         linear_num_value_heads=8, linear_key_head_dim=4,
                         linear_value_head_dim=4)),
    "qwen_moe": ("QwenMoeCausalLM", "QwenMoeBackbone",
                 dict(GQA, moe_intermediate_dim=16, shared_expert_intermediate_dim=16,
                      num_experts=4, top_k=2)),
    "qwen3_moe": ("Qwen3MoeCausalLM", "Qwen3MoeBackbone",
                  dict(GQA, moe_intermediate_dim=16, num_experts=4, top_k=2, head_dim=4)),
    "rwkv7": ("RWKV7CausalLM", "RWKV7Backbone",
              dict(hidden_size=HIDDEN, head_size=4, num_layers=2, vocabulary_size=VOCAB,
                   intermediate_dim=64, gate_lora=8, mv_lora=8, aaa_lora=8, decay_lora=8)),
    "smollm3": ("SmolLM3CausalLM", "SmolLM3Backbone",
                dict(vocabulary_size=VOCAB, hidden_dim=HIDDEN, intermediate_dim=64, num_layers=2,
                     num_attention_heads=8, num_key_value_heads=2, attention_bias=False,
                     attention_dropout=0.0, rope_layer_enabled_list=[True, True],
                     layer_types=["full_attention"] * 2, mlp_bias=False,
                     layer_norm_epsilon=1e-6, max_position_embeddings=16, rope_theta=10000.0,
                     partial_rotary_factor=1.0)),
    # Text only: vision_encoder_config and audio_encoder_config are optional.
    "gemma3n": ("Gemma3nCausalLM", "Gemma3nBackbone",
                dict(text_vocab_size=VOCAB, text_hidden_size=HIDDEN, num_hidden_layers=2,
                     pad_token_id=0, num_attention_heads=8, num_key_value_heads=2, head_dim=4,
                     intermediate_size=[64, 64], hidden_activation="gelu_approximate",
                     layer_types=["sliding_attention", "full_attention"], sliding_window=4,
                     rope_theta=10000.0, max_position_embeddings=16,
                     vocab_size_per_layer_input=VOCAB, hidden_size_per_layer_input=8,
                     altup_num_inputs=2, laurel_rank=8)),
}
# Vision-language decoders: images (16x16 in 4x4 patches) and tokens in,
# next tokens out.
VIT = dict(num_layers=2, num_heads=8, hidden_dim=HIDDEN)
FAMILIES.update({
    "pali_gemma": ("PaliGemmaCausalLM", "PaliGemmaBackbone",
                   dict(GQA, head_dim=4, image_size=16, vit_patch_size=4, vit_num_heads=8,
                        vit_hidden_dim=HIDDEN, vit_num_layers=2, vit_intermediate_dim=64)),
    "blip2": ("BLIP2CausalLM", "BLIP2Backbone",
              dict(vision_encoder=Part("BLIP2VisionEncoder", dict(
                       VIT, image_size=16, patch_size=4, intermediate_dim=64,
                       use_patch_bias=True, use_class_token=True, use_mha_bias=True,
                       use_mlp_bias=True, dropout_rate=0.0, layer_norm_epsilon=1e-6,
                       initializer_range=0.02)),
                   qformer=Part("BLIP2QFormer", dict(
                       VIT, num_query_tokens=8, intermediate_dim=64, vision_dim=HIDDEN,
                       cross_attention_frequency=1, dropout=0.0, layer_norm_epsilon=1e-12)),
                   language_model=Part("BLIP2CustomOPT", dict(
                       MHA, num_query_tokens=8, dropout=0.0, max_sequence_length=32,
                       qformer_hidden_dim=HIDDEN)))),
    "parseq": ("PARSeqCausalLM", "PARSeqBackbone",
               dict(image_encoder=Part("ViTBackbone", dict(
                        VIT, image_shape=(16, 16, 3), patch_size=4, mlp_dim=64,
                        use_class_token=False)),
                    vocabulary_size=VOCAB, max_label_length=8, decoder_hidden_dim=HIDDEN,
                    num_decoder_layers=2, num_decoder_heads=8, decoder_mlp_dim=64,
                    dropout_rate=0.0, attention_dropout=0.0)),
})
TEXT = dict(MHA, max_sequence_length=16)
IMAGE = dict(image_shape=(16, 16, 3), patch_size=4, num_layers=2, num_heads=8, hidden_dim=HIDDEN)
FAMILIES.update({
    "albert": ("AlbertTextClassifier", "AlbertBackbone", dict(TEXT, embedding_dim=16)),
    "bert": ("BertTextClassifier", "BertBackbone", dict(TEXT, dropout=0.0)),
    "deberta_v3": ("DebertaV3TextClassifier", "DebertaV3Backbone",
                   dict(TEXT, dropout=0.0, bucket_size=8)),
    "distil_bert": ("DistilBertTextClassifier", "DistilBertBackbone", dict(TEXT, dropout=0.0)),
    "esm": ("ESMProteinClassifier", "ESMBackbone", dict(TEXT, dropout=0.0)),
    "f_net": ("FNetTextClassifier", "FNetBackbone",
              dict(vocabulary_size=VOCAB, num_layers=2, hidden_dim=HIDDEN, intermediate_dim=64,
                   max_sequence_length=16, dropout=0.0)),
    "roberta": ("RobertaTextClassifier", "RobertaBackbone", dict(TEXT, dropout=0.0)),
    "roformer_v2": ("RoformerV2TextClassifier", "RoformerV2Backbone",
                    dict(MHA, head_size=4, dropout=0.0)),
    "xlm_roberta": ("XLMRobertaTextClassifier", "XLMRobertaBackbone", dict(TEXT, dropout=0.0)),
    "vit": ("ViTImageClassifier", "ViTBackbone", dict(IMAGE, mlp_dim=64)),
    "deit": ("DeiTImageClassifier", "DeiTBackbone", dict(IMAGE, intermediate_dim=64)),
})
KINDS = {name: "text_classifier" for name in (
    "albert", "bert", "deberta_v3", "distil_bert", "esm", "f_net", "roberta", "roformer_v2",
    "xlm_roberta")} | {"vit": "image_classifier", "deit": "image_classifier"} | {
    name: "vision_causal_lm" for name in ("pali_gemma", "blip2", "parseq")}
# Task arguments beyond the backbone. PARSeq trains on num_perms // 2
# permutations of the label order, the first the identity and the rest
# drawn by Keras's random ops (their streams differ per backend): 2 keeps
# only the identity and its mirror, the same on both.
TASK_KWARGS = {"parseq": dict(num_perms=2)}
DERIVE_ONLY = {
    "electra": ("ElectraBackbone",
                dict(vocab_size=VOCAB, num_layers=2, num_heads=8, hidden_dim=HIDDEN,
                     embedding_dim=16, intermediate_dim=64, max_sequence_length=16),
                "keras-hub 0.32.0 ships no Electra task to train"),
    "dinov2": ("DINOV2Backbone",
               dict(patch_size=4, num_layers=2, hidden_dim=HIDDEN, num_heads=8,
                    intermediate_dim=64, image_shape=(16, 16, 3),
                    position_embedding_shape=(16, 16, 3)),
               "keras-hub 0.32.0 ships no DINOv2 task to train"),
}
# The five backbones that ship get_layout_map, in the configs
# tests/keras_support/hub_driver.py trains (every head count divides 8, so
# the shipped maps are valid on both meshes).
SHIPPED = ("gemma", "llama", "llama3", "qwen", "qwen2", "qwen_moe", "qwen3_moe")
