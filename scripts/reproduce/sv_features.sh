#!/usr/bin/env bash
# Singular vectors align with features (methods/sv_features) reproduction.
# 1) CPU toys A-D (spec §6): single pair + lam=0 control, multi-pair, least-squares oracle, SAD on a
#    trained one-layer model with the random-rotation control (~5-10 min on a loaded 2-core box).
set -euo pipefail
export HF_HUB_OFFLINE=1
icml26 experiment=sv_features_toy "$@"

# 2) Paper toy schedules (N=20/D=H=10 and N=100/D=H=50, AdamW lr 1e-3, batch 1024, 10k steps):
icml26 experiment=sv_features_paper "$@"

# 3) Real-model SAD (spec §5, §7; GPT-2 small on 128 IOI prompts, Pythia-160M checkpoints) is NOT
#    driven from here: the library call works on any GPT-2 / Llama-style HF model loaded by hub id, e.g.
#      from transformers import AutoModelForCausalLM
#      from methods.sv_features import sparse_attention_decomposition
#      m = AutoModelForCausalLM.from_pretrained("gpt2", attn_implementation="eager")
#      res = sparse_attention_decomposition(m, ids, layer=9, head=9)   # res.n_recon, res.sparseness
#    The IOI prompt generator and the Pythia checkpoint loop (GPT-NeoX partial rotary) are not written.
