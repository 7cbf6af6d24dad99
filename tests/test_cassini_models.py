"""Cassini Table 4.2's models in the catalog (emulator/data/models.toml, the Cassini block).

Sizes are the published configurations the descriptions name; what is derived says "estimate:".
"""

from __future__ import annotations

import pytest

from halyard.datamodel import Allocation, JobSpec, NodeAllocation, Parallelism, load_cluster
from halyard.emulator import PerformanceModel

# catalog name -> parameters of the configuration its description names (the gradient is fp32)
TABLE_4_2 = {"vgg16": 138_357_544, "wide-resnet101-2": 126_886_696, "roberta-base": 125e6,
             "camembert-base": 110e6, "xlm": 665e6, "gpt1": 117e6, "gpt2-medium": 355e6, "gpt3-xl": 1.3e9}


@pytest.fixture(scope="module")
def pm():
    return PerformanceModel()


@pytest.mark.parametrize("model", sorted(TABLE_4_2))
def test_sizes_and_sources(pm, model):
    profile = pm.profile(model)
    assert profile.gradient_bytes == pytest.approx(TABLE_4_2[model] * 4, rel=1e-3)
    assert "Cassini Table 4.2" in profile.description


def test_vgg16_a100_step_is_elasticflows_measurement(pm):
    """The one measured figure of the block: ElasticFlow's A100 VGG16 bs64 at 5.05 iterations/s."""
    assert pm.profile("vgg16").reference_batch == 64
    assert pm.profile("vgg16").compute_s["A100"] == pytest.approx(1 / 5.05, rel=1e-3)


def test_language_models_scale_with_tokens_times_parameters(pm):
    """6 P x tokens at one V100 rate: RoBERTa-base and CamemBERT-base share shape and batch, so
    their step times are in the ratio of their parameters."""
    ratio = pm.profile("roberta-base").compute_s["V100"] / pm.profile("camembert-base").compute_s["V100"]
    assert ratio == pytest.approx(125 / 110, rel=1e-3)


def test_gpt3_xl_needs_model_parallelism_on_the_testbed(pm):
    """Table 4.2 trains GPT-3 model parallel: at its per-GPU batch (2 sequences, no micro-batch fallback) it
    does not fit one 40 GB A100; a 4-stage pipeline does."""
    cluster = load_cluster("cassini-testbed")
    alone = JobSpec(job_id="g", submit_time=0.0, model="gpt3-xl", num_gpus=1, iterations=10, batch_size=2)
    assert not pm.fits_memory(alone, "A100")
    piped = JobSpec(job_id="g", submit_time=0.0, model="gpt3-xl", num_gpus=4, iterations=10, batch_size=2,
                    parallelism=Parallelism(data=1, tensor=1, pipeline=4))
    alloc = Allocation(tuple(NodeAllocation(f"tor0-n{i}", (0,), 0, 0) for i in range(4)))
    assert pm.fits_plan(piped, alloc, cluster)
    timing = pm.job_timing(piped, alloc, cluster)
    assert timing.stages and len(timing.stages) == 4 and timing.links  # activations cross the NICs
