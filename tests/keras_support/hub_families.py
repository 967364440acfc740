"""Every decoder-LLM family of keras-hub 0.32.0, and the encoder and vision
families whose backbone has Dense/attention weights, as a tiny random
config (issue 27): ``FAMILIES[name] = (task class, backbone class, backbone
kwargs)``; ``KINDS[name]`` says what the task reads and predicts
(``causal_lm`` unless listed); ``DERIVE_ONLY[name] = (backbone class,
kwargs, why it is not trained)``: a derived map is checked, no training.

The list is keras-hub's ``CausalLM`` subclasses whose backbone is a text
decoder. Left out, with why: ``BLIP2CausalLM``, ``PaliGemmaCausalLM``,
``PARSeqCausalLM`` (need an image encoder: vision-language models),
``Gemma3nCausalLM`` (needs audio and vision encoder configs), ``Gemma4AssistantCausalLM``
(Gemma4's backbone, covered by ``gemma4``), ``SmolLMCausalLM`` (an alias
of ``SmolLM3CausalLM``), ``Qwen2CausalLM`` (``QwenBackbone``, covered by
``qwen``). Every config: 2 layers, hidden 32, 8 query heads and 2
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
}
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
    "xlm_roberta")} | {"vit": "image_classifier", "deit": "image_classifier"}
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
