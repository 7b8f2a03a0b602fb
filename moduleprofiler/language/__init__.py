"""Language models as people run them: generation step by step, key/value caches, mixture of
experts, Transformers models built by name without downloads, and size sweeps.

Needs ``transformers`` only where a Transformers model or cache is involved."""

from moduleprofiler.language.cache import (
    CacheLayer,
    KVCacheSize,
    kv_cache_size,
    predict_kv_cache_bytes,
)
from moduleprofiler.language.generation import (
    GenerationProfile,
    Step,
    StepListener,
    profile_generation,
)
from moduleprofiler.language.models import ConfigFieldError, hf_config, hf_model, text_inputs
from moduleprofiler.language.moe import ExpertLoad, MoEParameters, moe_parameters
from moduleprofiler.language.sweep import plot_sweep, sweep

__all__ = [
    "CacheLayer",
    "ConfigFieldError",
    "ExpertLoad",
    "GenerationProfile",
    "KVCacheSize",
    "MoEParameters",
    "Step",
    "StepListener",
    "hf_config",
    "hf_model",
    "kv_cache_size",
    "moe_parameters",
    "plot_sweep",
    "predict_kv_cache_bytes",
    "profile_generation",
    "sweep",
    "text_inputs",
]
