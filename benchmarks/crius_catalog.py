# ruff: noqa: E501  (the source strings are written out whole, as they appear in models.toml)
"""Print the catalog entries of Crius Table 2's large models (emulator/data/models.toml's last section).

    .venv/bin/python benchmarks/crius_catalog.py > /tmp/table2.toml   # then replace the section by hand

Every figure's source string states the rule that made it: parameters from Table 2, layer shapes
from Alpa's benchmark suites, training FLOPs at Megatron-LM's 44 % of peak, activations by
Korthikanti et al. (docs/crius.md, "Table 2's large models").
"""
# Dense tensor peaks of the catalog's [gpus] table (TFLOP/s) and Megatron-LM's 44 % of peak
# (Narayanan et al., SC'21, Table 1: 1.7B GPT on 32 A100s, 137 TFLOP/s per GPU).
PEAK = {"V100": 125.0, "P100": 21.2, "A100": 312.0}
# Alpa runs Wide-ResNet in fp32 (its suite_wresnet benchmark sets no fp16 flag; BERT/MoE run fp16), so its
# compute is costed at the fp32 peak: plain FP32 before Ampere, TF32 tensor cores on Ampere, which XLA uses
# for fp32 convolutions and matmuls by default ([doc] JAX "Matmul precision": float32 dot products use TF32
# on recent GPUs unless told otherwise; [doc] NVIDIA datasheets for the dense peaks).
FP32_PEAK = {
    "V100": (15.7, "[doc] NVIDIA V100 SXM2 datasheet: 15.7 TFLOPS FP32 (no TF32 on Volta)"),
    "P100": (10.6, "[doc] NVIDIA P100 SXM2 datasheet: 10.6 TFLOPS FP32"),
    "A100": (156.0, "[doc] NVIDIA A100 datasheet: 156 TFLOPS TF32 tensor, dense"),
    "A40": (74.8, "[doc] NVIDIA A40 datasheet: 74.8 TFLOPS TF32 tensor, dense (149.6 with sparsity)"),
    "A10": (62.5, "[doc] NVIDIA A10 datasheet: 62.5 TFLOPS TF32 tensor, dense (125 with sparsity)"),
}
MFU = 0.44
REF_BATCH = 32  # samples per GPU (ours)
S = 1024  # tokens per sequence (Alpa's suites)
ALPA_GPT = "Alpa (Zheng et al., OSDI'22) Table 4 GPT-3 configurations, [code alpa-projects/alpa benchmark/alpa/suite_manual_gpt.py gpt_specs]"
ALPA_MOE = "[code alpa-projects/alpa benchmark/alpa/paper_manual_moe_suite.py moe_specs]"
ALPA_WRN = "[code alpa-projects/alpa benchmark/alpa/suite_wresnet.py wresnet_specs]"
models = []
for size, p, h, n_layers, a in (("0.76b", 0.76e9, 1536, 24, 16), ("1.3b", 1.3e9, 2048, 24, 32), ("2.6b", 2.6e9, 2560, 32, 32), ("6.7b", 6.7e9, 4096, 32, 32)):
    models.append(("bert-" + size, "language", f"BERT {size.upper()} (Crius Table 2; the GPT-3 layer shapes Alpa benchmarks: {n_layers} layers, hidden {h}, {a} heads, 1,024 tokens)", p, 8 * p * S, f"8 x {p:.3g} params x 1,024 tokens (6 for forward + backward, 2 more for the forward recomputed under Alpa's rematerialisation)",
                   n_layers, h, a, f"{ALPA_GPT}: {n_layers} layers, hidden {h}, {a} heads, sequence 1,024"))
# Alpa's MoE feed-forward layers are 8 h wide ([code alpa-projects/alpa benchmark/alpa/benchmark_one_case_moe.py]:
# intermediate_size = hidden_size * 8; util.py compute_moe_parameter_count, mlp_factor=8): 16 h^2 weights per
# feed-forward (one dense or one expert), so the named sizes come out of the shapes: moe-0.69b's 8 layers of
# hidden 768 hold 4 x 20 h^2 (dense) + 4 x (4 + 16 x 16) h^2 (MoE) + 32,000 h = 0.685 B.
MOE_MLP_FACTOR = 8
MOE_SHAPE_SOURCE = "[code alpa-projects/alpa benchmark/alpa/util.py compute_moe_parameter_count] with mlp_factor = 8 (benchmark_one_case_moe.py: intermediate_size = hidden_size * 8)"
moe_experts = {}
for size, p, h, n_layers, e in (("0.69b", 0.69e9, 768, 8, 16), ("1.3b", 1.3e9, 768, 16, 16), ("2.4b", 2.4e9, 1024, 16, 16), ("10b", 10e9, 1536, 16, 32), ("27b", 27e9, 2048, 16, 48)):
    moe = n_layers // 2  # every other layer (moe_layers below)
    ffn = 2 * MOE_MLP_FACTOR * h * h  # one feed-forward (dense or one expert): h x 8h and 8h x h
    active = moe * (4 * h * h + 2 * ffn) + (n_layers - moe) * (4 * h * h + ffn) + 32000 * h
    expert = moe * e * ffn
    whole = expert + moe * 4 * h * h + (n_layers - moe) * (4 * h * h + ffn) + 32000 * h
    moe_experts["moe-" + size] = (e, expert / whole, f"{MOE_SHAPE_SOURCE}: {moe} MoE layers x {e} experts x 16 h^2 = {expert:.4g} of the shapes' {whole:.4g} parameters, h = {h}")
    models.append(("moe-" + size, "language", f"GShard MoE {size.upper()} (Crius Table 2; Alpa's MoE shapes: {n_layers} layers, hidden {h}, {e} experts, 1,024 tokens)", p, 8 * active * S,
                   f"8 x {active:.4g} active params x 1,024 tokens; active = every other layer at 36 h^2 (attention 4 h^2 + the top-2 gated experts' 2 x 16 h^2, GShard top-2 gating; Alpa's feed-forward is 8 h wide), the others dense at 20 h^2 (attention 4 h^2 + feed-forward 16 h^2) + 32,000 x h embedding",
                   n_layers, h, 16, f"{ALPA_MOE}: {n_layers} layers, hidden {h}, 16 heads, {e} experts, sequence 1,024"))
for size, p, c, w in (("0.5b", 0.5e9, 224, 2), ("1b", 1e9, 320, 2), ("2b", 2e9, 448, 2), ("4b", 4e9, 640, 2), ("6.8b", 6.8e9, 320, 16)):
    models.append(("wresnet-" + size, "image", f"Wide-ResNet-50 {size.upper()} (Crius Table 2; Alpa's shapes: base channels {c}, width factor {w}, 224 x 224)", p, 4 * 2 * 165.5 * p,
                   f"4 x 2 x 165.5 x {p:.3g} params per image (forward 2 FLOPs per MAC, 165.5 MACs per parameter as WRN-50-2's 11.4 GMACs over 68.9M parameters [doc] torchvision wide_resnet50_2; backward 2x forward, one forward recomputed)",
                   16, c, w, f"{ALPA_WRN}: 50 layers in 16 residual blocks (Alpa cuts stages at the 16 blocks), base channels {c}, width factor {w}"))
out = []
for name, task, desc, p, flop, flop_src, n_layers, h, a, shape_src in models:
    q = f'"{name}"'
    out.append(f"[models.{q}]")
    out.append(f'task = "{task}"')
    out.append(f'description = "{desc}"')
    out.append(f'reference_batch = {{ value = {REF_BATCH}, source = "estimate: ours, 32 samples per GPU, so N_G = 4-8 GPUs train Table 2\'s smallest global batches (128-256); the trace adaptation keeps it" }}')
    out.append(f'gradient_bytes = {{ value = {p * 4:.5g}, source = "Crius Table 2: {p / 1e9:g}B parameters (the size as named in Alpa\'s benchmark suites [code alpa-projects/alpa benchmark/alpa]) x 4 B (fp32 gradient)" }}')
    out.append('backward_fraction = { value = 0.667, source = "estimate: 2/3; backward costs about two forward passes (input-gradient and weight-gradient GEMMs), as for bert-large" }')
    if task == "image":
        act = 108e6 * h / 64 * 0.25
        out.append(f'activation_bytes = {{ value = {act * REF_BATCH:.4g}, source = "estimate: resnet50\'s 108 MB per image (its activation_bytes / 64) x {h}/64 (activations scale with the channel width at 224 x 224) x 0.25 (rematerialisation keeps the 16 block inputs, about a quarter) x 32 images" }}')
        lob = 1605632 * h / 64  # h is the base channel width here (the tuple's third field)
        out.append(f'layers = {{ value = 16, source = "{shape_src}" }}')
        out.append(f'layer_output_bytes = {{ value = {lob:.5g}, source = "estimate: resnet50\'s layer2 output 1,605,632 B per image (fp32, Alpa runs Wide-ResNet in fp32) x {h}/64 channels" }}')
    else:
        per = n_layers * 2 * S * h + S * h * (34 + 5 * a * S / h)
        out.append(f'activation_bytes = {{ value = {per * REF_BATCH:.4g}, source = "estimate: Korthikanti et al. (MLSys\'23) with full recomputation (Alpa\'s remat): 2 s h bytes kept per layer x {n_layers} layers plus one layer\'s working set s h (34 + 5 a s / h), s = 1,024, h = {h}, a = {a}, x 32 sequences" }}')
        out.append(f'layers = {{ value = {n_layers}, source = "{shape_src}" }}')
        out.append(f'layer_output_bytes = {{ value = {S * h * 2}, source = "estimate: s x h x 2 B (16-bit) with s = 1,024, h = {h}: one layer\'s output per sequence (Korthikanti et al., MLSys\'23, section 4.2.2)" }}')
        if name.startswith("moe-"):
            out.append(f'moe_layers = {{ value = {n_layers // 2}, source = "GShard (Lepikhin et al., ICLR\'21, section 2.1: every other feed-forward layer replaced by a top-2 gated MoE layer); [code alpa-projects/alpa alpa/model/moe.py FlaxMoELayerCollection]: layer i is an MoE layer when i % 2 == 0, so {n_layers // 2} of the {n_layers} layers" }}')
            e, frac, frac_src = moe_experts[name]
            out.append(f'experts = {{ value = {e}, source = "{ALPA_MOE}: {e} experts per MoE layer" }}')
            out.append(f'expert_fraction = {{ value = {frac:.4f}, source = "{frac_src}" }}')
    peaks = ({g: (peak, f"the [gpus.{g}] peak ({peak:g} TFLOP/s)") for g, peak in PEAK.items()} if task != "image"
             else {g: (peak, f"the fp32 peak, {peak:g} TFLOP/s ({src}; Alpa trains Wide-ResNet in fp32)")
                   for g, (peak, src) in FP32_PEAK.items()})
    for g, (peak, peak_src) in peaks.items():
        v = flop * REF_BATCH / (peak * 1e12 * MFU)
        out.append(f'compute_s.{g} = {{ value = {v:.4g}, source = "estimate: training FLOPs at 44% of {peak_src}, the per-GPU efficiency Megatron-LM reports for its 1.7B GPT on 32 A100s (Narayanan et al., SC\'21, Table 1: 137 TFLOP/s, 44% of peak, FLOPs counted with activation recomputation as here); FLOPs: {flop_src}, x 32 samples" }}')
    out.append("")
print(
    "\n# Crius Table 2's large models (Wide-ResNet, BERT, GShard MoE at the listed sizes), generated by the rules in\n# each source; none fits one GPU at every size, so a plan with tensor/pipeline parallelism (Crius Fig. 3) may be needed.\n" + "\n".join(out))
