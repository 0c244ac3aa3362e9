"""gpucore.models.plan: the memory plan of a training step from a folder's config.json (no weights read) or
a loaded model, against the allocator's measured peak of that step on the CPU (the C test, test_lm_plan,
holds real-width models to it); its table; bad arguments refused. The model is a small llama folder this
test writes (config.json + safetensors of random weights)."""
import json

import numpy as np
import pytest

import gpucore
from gpucore import memory
from gpucore.errors import InvalidArgumentError, NotSupportedError

V, D, F, L, H, KV, P = 4096, 64, 160, 2, 4, 2, 256


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    d = tmp_path_factory.mktemp("plan_llama")
    cfg = {"model_type": "llama", "vocab_size": V, "hidden_size": D, "intermediate_size": F, "num_hidden_layers": L,
           "num_attention_heads": H, "num_key_value_heads": KV, "max_position_embeddings": P,
           "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "tie_word_embeddings": False, "torch_dtype": "float32"}
    (d / "config.json").write_text(json.dumps(cfg))
    rng = np.random.default_rng(3)
    hd = D // H
    shapes = {"model.embed_tokens.weight": (V, D), "model.norm.weight": (D,), "lm_head.weight": (V, D)}
    for i in range(L):
        p = "model.layers.%d." % i
        shapes.update({p + "input_layernorm.weight": (D,), p + "post_attention_layernorm.weight": (D,),
                       p + "self_attn.q_proj.weight": (D, D), p + "self_attn.k_proj.weight": (KV * hd, D),
                       p + "self_attn.v_proj.weight": (KV * hd, D), p + "self_attn.o_proj.weight": (D, D),
                       p + "mlp.gate_proj.weight": (F, D), p + "mlp.up_proj.weight": (F, D),
                       p + "mlp.down_proj.weight": (D, F)})
    tensors = {k: gpucore.tensor((rng.standard_normal(s) * 0.05).astype(np.float32)) for k, s in shapes.items()}
    gpucore.serialization.save_file(tensors, str(d / "model.safetensors"))
    return str(d)


@pytest.mark.parametrize("lora,policy,batch", [({"r": 4}, "keep_all", 2), ({"r": 4}, "recompute_all", 1),
                                               (None, "sqrt_n", 2)])
def test_plan_matches_the_measured_peak(folder, lora, policy, batch):
    seq = 64
    p = gpucore.models.plan(folder, batch, seq, lora=lora, checkpoint_policy=policy, optimizer="none", device="cpu")
    assert sum(p.breakdown.values()) == p.peak_bytes
    assert set(p.breakdown) == set(gpucore.models_plan.CATEGORIES)
    memory.empty_cache()
    m = gpucore.models.LanguageModel(folder, device="cpu")
    try:
        if lora is None:
            m.set_full_finetune(True)
        else:
            m.add_lora(**lora)
        m.set_checkpoint_policy(policy)
        q = gpucore.models.plan(m, batch, seq, lora=lora, checkpoint_policy=policy, optimizer="none")
        assert q.peak_bytes == p.peak_bytes and q.breakdown == p.breakdown
        ids = np.random.default_rng(5).integers(0, V, size=(batch, seq))
        memory.reset_peak_memory_stats()
        before = memory.memory_allocated()
        m.forward_backward(ids, ids)
        rise = memory.max_memory_allocated() - before
        planned = p.peak_bytes - p.persistent_bytes
        # the plan counts the batch's two i64 tensors above the persistent bytes; the measured rise starts with
        # them allocated by the call, so both are the step's own memory
        assert abs(rise - planned) <= 0.03 * rise + 4096, (rise, planned, str(p))
    finally:
        m.close()


def test_plan_table_and_arguments(folder):
    p = gpucore.models.plan(folder, 1, 32, lora={"r": 8, "target_modules": ["q_proj", "down_proj"]})
    text = str(p)
    for name in gpucore.models_plan.CATEGORIES:
        assert name in text
    assert "peak" in text and p.where in text
    assert p.as_dict()["peak_bytes"] == p.peak_bytes
    q = gpucore.models.plan(folder, 1, 32, lora={"r": 8}, quantize="nf4")
    d = gpucore.models.plan(folder, 1, 32, lora={"r": 8})
    assert q.breakdown["weights"] < d.breakdown["weights"]
    with pytest.raises(InvalidArgumentError, match="c_attn"):
        gpucore.models.plan(folder, 1, 32, lora={"r": 8, "target_modules": ["c_attn"]})
    with pytest.raises(InvalidArgumentError, match="checkpoint_policy"):
        gpucore.models.plan(folder, 1, 32, checkpoint_policy="sometimes")
    with pytest.raises(InvalidArgumentError, match="lora"):
        gpucore.models.plan(folder, 1, 32, lora={"rank": 8})
    with pytest.raises(NotSupportedError):
        gpucore.models.plan(folder, 1, 32, zero=3, world_size=2)
    with pytest.raises(NotSupportedError):
        gpucore.models.plan(folder, 1, 32, generate_max_len=64)


def test_plan_under_a_memory_limit(folder):
    """memory_limit replays the step under the allocator's limit: the step's own allocated peak passes, a limit
    below it raises OutOfMemoryError naming the request, and the plan under a limit that fits is the same plan."""
    from gpucore.errors import OutOfMemoryError
    p = gpucore.models.plan(folder, 2, 64, lora={"r": 4}, device="cpu")
    q = gpucore.models.plan(folder, 2, 64, lora={"r": 4}, device="cpu", memory_limit=4 * p.peak_bytes)
    assert q.as_dict() == p.as_dict()
    with pytest.raises(OutOfMemoryError, match="does not fit under a memory limit"):
        gpucore.models.plan(folder, 2, 64, lora={"r": 4}, device="cpu", memory_limit=p.peak_bytes - 1)
    with pytest.raises(InvalidArgumentError):
        gpucore.models.plan(folder, 2, 64, lora={"r": 4}, memory_limit=-1)
