"""Every decoder-LLM family of keras-hub 0.32.0, the encoder-decoder
ones, and the encoder and vision families whose backbone has
Dense/attention weights, as a tiny random config (issue 27):
``FAMILIES[name] = (task class, backbone class, backbone kwargs)``;
``KINDS[name]`` says what the task reads and predicts (``causal_lm``
unless listed); ``DERIVE_ONLY[name] = (backbone class, kwargs, why it is
not trained)``: a derived map is checked, no training; ``LEFT_OUT[name]``:
every other model directory of ``keras_hub/src/models``, with why
(``tests/test_keras_layout.py`` checks that these three cover every
directory, ``MODULES`` naming a family's directory where it differs).

Decoders: every ``CausalLM`` subclass of keras-hub 0.32.0: the text
decoders, Gemma3n text-only (its vision and audio encoders are optional),
the vision-language ones (``pali_gemma``, ``blip2`` with its OPT language
model, ``parseq``: ``kind`` ``vision_causal_lm``, their sub-models built
from ``Part``s), and ``Gemma4AssistantCausalLM`` (``gemma4_assistant``,
kind ``mtp_assistant``: a speculative-decoding draft model whose ``call``
raises by design, so the matrix runs its ``call_with_cache`` forward; its
own Dense layers are laid out by a map derived from the task,
``DERIVE_FROM_TASK``). ``TASKS_LEFT_OUT``: the ``CausalLM``,
``Seq2SeqLM`` and ``AudioToText`` classes no family trains, with why. Every config: 2 layers, hidden 32,
8 query heads and 2 key/value heads (grouped-query: 2 divides neither
model axis of 4 nor 8), 4 experts where there are experts (divides 4, not
8). Encoder-decoders (``t5``, ``bart``, ``t5gemma``, ``t5gemma2``,
``edrec``; kind ``seq2seq_lm``): the same widths on both sides, 8 encoder
and 8 decoder tokens. Encoders: 2 layers, hidden 32, 8 heads, a 4-class
classifier task; vision: 16x16 images in 4x4 patches.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Part:
    """A sub-model a backbone takes as an argument (BLIP-2's encoders and
    language model, PARSeq's image encoder, SAM3's encoders and decoders):
    ``keras_hub.models.<cls>(**kwargs)``, else ``keras_hub.layers.<cls>``,
    built afresh with each backbone (under the build's distribution scope)."""

    cls: str
    kwargs: dict


def build_backbone(backbone_name: str, /, **kwargs: Any) -> Any:
    """``keras_hub.models.<backbone_name>(**kwargs)``, each ``Part`` built first."""
    import keras_hub

    def make(part):
        cls = getattr(keras_hub.models, part.cls, None) or getattr(keras_hub.layers, part.cls)
        return cls(**part.kwargs)

    parts = {k: make(v) for k, v in kwargs.items() if isinstance(v, Part)}
    return getattr(keras_hub.models, backbone_name)(**(kwargs | parts))


def backbone_builder(backbone_name: str):
    """A callable taking the backbone's kwargs (for ``keras_layout.abstract_model``)."""
    return functools.partial(build_backbone, backbone_name)


def build_task(family: str, backbone: Any = None, **heads: Any) -> Any:
    """``FAMILIES[family]``'s task on ``backbone`` (a new one when ``None``),
    without a preprocessor, with ``TASK_KWARGS`` and ``heads``."""
    import keras_hub

    task_name, backbone_name, kwargs = FAMILIES[family]
    if backbone is None:
        backbone = build_backbone(backbone_name, **kwargs)
    return getattr(keras_hub.models, task_name)(
        backbone=backbone, preprocessor=None, **(TASK_KWARGS.get(family, {}) | heads))


def derivation_model(family: str) -> Any:
    """The model ``layout_map_for`` reads for ``family``: its backbone built
    abstractly (no weights), or for ``DERIVE_FROM_TASK`` its task, built."""
    if family in DERIVE_FROM_TASK:
        return build_task(family)
    from parity import keras_layout

    backbone, kwargs = (FAMILIES[family][1:] if family in FAMILIES
                        else DERIVE_ONLY[family][:2])
    return keras_layout.abstract_model(backbone_builder(backbone), **kwargs)


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
# Encoder-decoders: encoder and decoder token ids (and padding masks) in,
# the decoder's next tokens out.
T5GEMMA = dict(vocabulary_size=VOCAB, encoder_hidden_dim=HIDDEN, encoder_intermediate_dim=64,
               encoder_num_layers=2, encoder_num_attention_heads=8,
               encoder_num_key_value_heads=2, encoder_head_dim=4,
               encoder_layer_types=["full_attention"] * 2, decoder_hidden_dim=HIDDEN,
               decoder_intermediate_dim=64, decoder_num_layers=2,
               decoder_num_attention_heads=8, decoder_num_key_value_heads=2,
               decoder_head_dim=4, decoder_layer_types=["full_attention"] * 2)
FAMILIES.update({
    "t5": ("T5Seq2SeqLM", "T5Backbone", dict(MHA, dropout=0.0)),
    "bart": ("BartSeq2SeqLM", "BartBackbone", dict(TEXT, dropout=0.0)),
    "t5gemma": ("T5GemmaSeq2SeqLM", "T5GemmaBackbone", T5GEMMA),
    # eoi_token_index: an id inside the tiny vocabulary (images' end token;
    # no vision encoder here).
    "t5gemma2": ("T5Gemma2Seq2SeqLM", "T5Gemma2Backbone",
                 dict(T5GEMMA, eoi_token_index=VOCAB - 1)),
    "edrec": ("EdRecSeq2SeqLM", "EdRecBackbone",
              dict(vocab_size=VOCAB, num_layers_enc=2, num_layers_dec=2, hidden_dim=HIDDEN,
                   intermediate_dim=64, num_heads=8)),
    # Gemma4's MTP draft model: a Gemma4 backbone of its own (KV-shared
    # layers) and three Dense layers of its own: pre_projection (the
    # target's embedding and hidden state, 2 x 64, to 32), post_projection
    # (32 to the target's 64) and centroids (32 to 8 vocabulary clusters).
    "gemma4_assistant": ("Gemma4AssistantCausalLM", "Gemma4Backbone",
                         dict(GQA, head_dim=4, image_size=16)),
})
KINDS = {name: "text_classifier" for name in (
    "albert", "bert", "deberta_v3", "distil_bert", "esm", "f_net", "roberta", "roformer_v2",
    "xlm_roberta")} | {"vit": "image_classifier", "deit": "image_classifier"} | {
    name: "vision_causal_lm" for name in ("pali_gemma", "blip2", "parseq")} | {
    name: "seq2seq_lm" for name in ("t5", "bart", "t5gemma", "t5gemma2", "edrec")} | {
    "gemma4_assistant": "mtp_assistant"}
# Task arguments beyond the backbone. PARSeq trains on num_perms // 2
# permutations of the label order, the first the identity and the rest
# drawn by Keras's random ops (their streams differ per backend): 2 keeps
# only the identity and its mirror, the same on both.
TASK_KWARGS = {
    "parseq": dict(num_perms=2),
    "gemma4_assistant": dict(backbone_hidden_size=64, num_centroids=8,
                             centroid_intermediate_top_k=2, use_ordered_embeddings=True),
}
# Families whose task owns weights beyond its backbone's, which the map
# must lay out too: derived from the task, built (a keras-hub task compiles
# in its constructor, making optimizer variables, which the stateless scope
# of ``abstract_model`` refuses; the tiny task is small).
DERIVE_FROM_TASK = {"gemma4_assistant"}
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
    "dinov3": ("DINOV3Backbone",
               dict(patch_size=4, num_layers=2, hidden_dim=HIDDEN, num_heads=8,
                    intermediate_dim=64, image_shape=(16, 16, 3)),
               "keras-hub 0.32.0 ships no DINOv3 task to train"),
    "xlnet": ("XLNetBackbone",
              dict(vocabulary_size=VOCAB, num_layers=2, num_heads=8, hidden_dim=HIDDEN,
                   intermediate_dim=64),
              "keras-hub 0.32.0 ships no XLNet task to train"),
    "video_prism": ("VideoPrismBackbone",
                    dict(num_frames=2, patch_size=4, hidden_dim=HIDDEN, intermediate_dim=64,
                         num_heads=8, num_spatial_layers=2, num_temporal_layers=2,
                         num_auxiliary_layers=1, vocabulary_size=VOCAB, num_text_layers=2,
                         image_shape=(16, 16, 3)),
                    "keras-hub 0.32.0 ships no VideoPrism task to train"),
    "whisper": ("WhisperBackbone",
                dict(MHA, num_mels=8, max_encoder_sequence_length=16,
                     max_decoder_sequence_length=16),
                "keras-hub 0.32.0 ships no Whisper task to train"),
    "moonshine": ("MoonshineBackbone",
                  dict(vocabulary_size=VOCAB, filter_dim=HIDDEN, encoder_num_layers=2,
                       decoder_num_layers=2, hidden_dim=HIDDEN, intermediate_dim=64,
                       encoder_num_heads=8, decoder_num_heads=8, max_position_embeddings=16,
                       partial_rotary_factor=0.5),
                  "MoonshineAudioToText reads raw audio: the matrix has no audio input kind"),
    "sam3": ("SAM3PromptableConceptBackbone",
             dict(vision_encoder=Part("SAM3VisionEncoder", dict(
                      image_shape=(28, 28, 3), patch_size=14, num_layers=2, hidden_dim=HIDDEN,
                      intermediate_dim=64, num_heads=8, fpn_hidden_dim=HIDDEN,
                      fpn_scale_factors=[4.0, 2.0, 1.0, 0.5], pretrain_image_shape=(28, 28, 3),
                      window_size=2, global_attn_indexes=[1])),
                  text_encoder=Part("SAM3TextEncoder", dict(
                      vocabulary_size=VOCAB, embedding_dim=HIDDEN, hidden_dim=HIDDEN,
                      num_layers=2, num_heads=8, intermediate_dim=64)),
                  geometry_encoder=Part("SAM3GeometryEncoder", dict(
                      num_layers=2, hidden_dim=HIDDEN, intermediate_dim=64, num_heads=8,
                      roi_size=7)),
                  detr_encoder=Part("SAM3DetrEncoder", dict(
                      num_layers=2, hidden_dim=HIDDEN, intermediate_dim=64, num_heads=8)),
                  detr_decoder=Part("SAM3DetrDecoder", dict(
                      image_shape=(28, 28, 3), patch_size=14, num_layers=2, hidden_dim=HIDDEN,
                      intermediate_dim=64, num_heads=8, num_queries=8)),
                  mask_decoder=Part("SAM3MaskDecoder", dict(
                      num_upsampling_stages=3, hidden_dim=HIDDEN, num_heads=8))),
             "SAM3PromptableConceptImageSegmenter trains on prompts, boxes and masks with "
             "its own losses: the matrix has no segmentation input kind"),
    "d_fine": ("DFineBackbone",
               dict(backbone=Part("HGNetV2Backbone", dict(
                        stem_channels=[3, 16, 16],
                        stackwise_stage_filters=[[16, 16, 64, 1, 3, 3], [64, 32, 256, 1, 3, 3],
                                                 [256, 64, 512, 2, 3, 5],
                                                 [512, 128, 1024, 1, 3, 5]],
                        apply_downsample=[False, True, True, True],
                        use_lightweight_conv_block=[False, False, True, True],
                        depths=[1, 1, 2, 1], hidden_sizes=[64, 256, 512, 1024],
                        embedding_size=16, use_learnable_affine_block=True, hidden_act="relu",
                        image_shape=(None, None, 3), out_features=["stage3", "stage4"],
                        data_format="channels_last")),
                    decoder_in_channels=[HIDDEN, HIDDEN], encoder_hidden_dim=HIDDEN,
                    num_denoising=0, num_labels=8, hidden_dim=HIDDEN, learn_initial_query=False,
                    num_queries=8, anchor_image_size=(64, 64), feat_strides=[16, 32],
                    num_feature_levels=2, encoder_in_channels=[512, 1024],
                    encode_proj_layers=[1], num_attention_heads=8, encoder_ffn_dim=64,
                    num_encoder_layers=1, hidden_expansion=0.5, depth_multiplier=0.5,
                    eval_idx=-1, num_decoder_layers=2, decoder_attention_heads=8,
                    decoder_ffn_dim=64, decoder_n_points=[4, 4], lqe_hidden_dim=16,
                    num_lqe_layers=2, out_features=["stage3", "stage4"],
                    image_shape=(None, None, 3)),
               "DFineObjectDetector trains on boxes and labels with its own matching loss: "
               "the matrix has no detection input kind"),
}
_CONV = "convolutional backbone: no Dense/attention weights to split Megatron-style"
LEFT_OUT = {
    **{name: _CONV for name in (
        "basnet", "cspnet", "deeplab_v3", "densenet", "efficientnet", "hgnetv2", "mobilenet",
        "resnet", "retinanet", "vae", "vgg", "xception")},
    "mobilenetv5": "convolutional backbone (its few attention blocks are multi-query over "
                   "conv features): not derived here",
    "mit": "SegFormer's Mix Transformer: attention over conv-reduced keys, not derived here",
    "segformer": "a MiT backbone with a conv decode head, not derived here",
    "swin_transformer": "windowed attention with relative position tables, not derived here",
    "vit_det": "windowed attention with relative position tables, not derived here",
    "sam": "its image encoder is ViTDet's (windowed attention), not derived here",
    "depth_anything": "a DINOv2 backbone (derived: dinov2) with a convolutional DPT head",
    "siglip": "two-tower backbone with no task that trains it in keras-hub 0.32.0, not derived here",
    "clip": "two-tower backbone with no task that trains it in keras-hub 0.32.0, not derived here",
    "metaclip_2": "two-tower backbone with no task that trains it in keras-hub 0.32.0, not "
                  "derived here",
    "flux": "a text-to-image diffusion pipeline (transformer, VAE, text encoders), not derived "
            "here",
    "stable_diffusion_3": "a text-to-image diffusion pipeline (MMDiT, VAE, CLIP and T5 text "
                          "encoders), not derived here",
    "rqvae": "keras_hub.models does not export RQVAEBackbone in keras-hub 0.32.0",
}
# keras_hub.models' language-model tasks that no family trains.
TASKS_LEFT_OUT = {
    "SmolLMCausalLM": "an alias of SmolLM3CausalLM (smollm3)",
    "Qwen2CausalLM": "QwenCausalLM under another name; Qwen2Backbone is QwenBackbone (qwen)",
    "BLIP2Seq2SeqLM": "BLIP-2's Flan-T5 variant: blip2's vision encoder and Q-Former (trained: "
                      "blip2) before a T5 language model (trained: t5)",
    "MoonshineAudioToText": "reads raw audio: the matrix has no audio input kind (its backbone "
                            "is derived: moonshine)",
}
# A family's directory under keras_hub/src/models where its name differs.
MODULES = {"gpt_neox": "gpt_neo_x", "gemma4_assistant": "gemma4"}
# The five backbones that ship get_layout_map, in the configs
# tests/keras_support/hub_driver.py trains (every head count divides 8, so
# the shipped maps are valid on both meshes).
SHIPPED = ("gemma", "llama", "llama3", "qwen", "qwen2", "qwen_moe", "qwen3_moe")
