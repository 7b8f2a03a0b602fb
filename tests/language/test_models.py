"""Transformers models by name or from a local config.json, on meta or CPU, with no network."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest
import torch

from moduleprofiler import ModuleProfiler
from moduleprofiler.cli import main
from moduleprofiler.language import ConfigFieldError, hf_config, hf_model, text_inputs
from tests.language.tiny import HIDDEN, VOCAB

transformers = pytest.importorskip("transformers")
NEEDS_TRANSFORMERS_5_24 = pytest.mark.skipif(
    tuple(int(part) for part in transformers.__version__.split(".")[:2]) < (5, 24),
    reason="the language extra needs transformers >= 5.24 (older versions build other "
           "attention and cache code paths)")

TINY_LLAMA = {"num_hidden_layers": 2, "hidden_size": HIDDEN, "num_attention_heads": 4,
              "num_key_value_heads": 2, "intermediate_size": 128, "vocab_size": VOCAB}
# embeddings 100 x 64 + per layer (q 64 x 64, k and v 64 x 32, o 64 x 64, gate/up/down
# 3 x 64 x 128, two norms 2 x 64) + final norm 64 + untied lm_head 64 x 100
LLAMA_PARAMS = (VOCAB * HIDDEN + 2 * (2 * 64 * 64 + 2 * 64 * 32 + 3 * 64 * 128 + 2 * 64)
                + 64 + HIDDEN * VOCAB)


@pytest.fixture(autouse=True)
def _no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("tried to reach the network")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)


@NEEDS_TRANSFORMERS_5_24
def test_by_name_on_meta_with_overrides() -> None:
    model = hf_model("llama", **TINY_LLAMA)
    assert type(model).__name__ == "LlamaForCausalLM"
    assert all(p.device.type == "meta" for p in model.parameters())
    assert LLAMA_PARAMS == 86_848
    assert sum(p.numel() for p in model.parameters()) == LLAMA_PARAMS
    assert not model.training
    profile = ModuleProfiler().profile(model, text_inputs(model, 1, 8))
    assert profile.complete and profile.total_params == LLAMA_PARAMS
    # q, k, v, o and the MLP: 8 tokens x (64 x 64 + 2 x 64 x 32 + 64 x 64 + 3 x 64 x 128)
    # per layer, plus the lm_head over 8 positions, plus attention (8 x 8 x 16 x 2 per head)
    linear = 8 * (2 * 64 * 64 + 2 * 64 * 32 + 3 * 64 * 128) * 2 + 8 * 64 * VOCAB
    attention = 2 * 4 * 2 * 8 * 8 * 16
    assert profile.total_macs == linear + attention


def test_the_hf_prefix_a_config_object_and_a_local_file(tmp_path: Path) -> None:
    config = hf_config("hf:llama", **TINY_LLAMA)
    assert config.num_hidden_layers == 2
    copy = hf_config(config, num_hidden_layers=1)
    assert (copy.num_hidden_layers, config.num_hidden_layers) == (1, 2)
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama", **TINY_LLAMA}))
    for source in (tmp_path, tmp_path / "config.json", str(tmp_path / "config.json")):
        model = hf_model(source, num_hidden_layers=1)
        assert model.config.num_hidden_layers == 1
        assert model.config.hidden_size == HIDDEN


def test_heads_and_devices() -> None:
    t5 = hf_model("t5", num_layers=1, d_model=32, d_ff=64, num_heads=2, d_kv=16,
                  vocab_size=VOCAB)
    assert type(t5).__name__ == "T5ForConditionalGeneration"
    assert set(text_inputs(t5, 2, 3)) == {"input_ids", "decoder_input_ids"}
    base = hf_model("gpt2", task="base", n_layer=1, n_embd=32, n_head=2, vocab_size=VOCAB)
    assert type(base).__name__ == "GPT2Model"
    cpu = hf_model("gpt2", device="cpu", dtype=torch.float16, n_layer=1, n_embd=32,
                   n_head=2, vocab_size=VOCAB)
    assert {p.dtype for p in cpu.parameters()} == {torch.float16}
    ids = text_inputs(cpu, 2, 5, labels=True)
    assert ids["input_ids"].shape == (2, 5) and torch.equal(ids["labels"], ids["input_ids"])
    assert int(ids["input_ids"].max()) < VOCAB


def test_a_training_step_by_name() -> None:
    model = hf_model("gpt2", n_layer=1, n_embd=32, n_head=2, vocab_size=VOCAB)
    profile = ModuleProfiler().profile(model, text_inputs(model, 1, 8, labels=True),
                                       backward=True)
    assert profile.complete
    # a backward costs about twice the forward (input and weight gradients)
    assert 1.8 < profile.total_backward_macs / profile.total_macs < 2.2


def test_errors_name_the_problem(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown model type 'no-such-model'"):
        hf_model("no-such-model")
    with pytest.raises(ValueError, match="task"):
        hf_model("gpt2", task="vision")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="seq2seq-lm"):
        hf_model("gpt2", task="seq2seq-lm")
    with pytest.raises(FileNotFoundError):
        hf_config(tmp_path / "missing.json")
    (tmp_path / "config.json").write_text(json.dumps({"hidden_size": 3}))
    with pytest.raises(ValueError, match="model_type"):
        hf_config(tmp_path)
    with pytest.raises(TypeError, match="source"):
        hf_config(3)
    with pytest.raises(ValueError, match="seq_len"):
        text_inputs(hf_model("gpt2", n_layer=1), 1, 0)


def test_encoder_only_types_default_to_their_base_model() -> None:
    small = {"num_hidden_layers": 1, "hidden_size": 32, "num_attention_heads": 2,
             "intermediate_size": 64, "vocab_size": VOCAB}
    assert type(hf_model("bert", **small)).__name__ == "BertModel"
    assert type(hf_model("roberta", **small)).__name__ == "RobertaModel"
    # a decoder asked for, or a head named, is still built
    assert type(hf_model("bert", is_decoder=True, **small)).__name__ == "BertLMHeadModel"
    assert type(hf_model("bert", task="causal-lm", **small)).__name__ == "BertLMHeadModel"
    # decoder-only types keep their causal-LM head
    gpt2 = hf_model("gpt2", n_layer=1, n_embd=32, n_head=2, vocab_size=VOCAB)
    assert type(gpt2).__name__ == "GPT2LMHeadModel"


def test_encoder_decoder_types_default_to_the_whole_model() -> None:
    # BART and Whisper have a causal-LM class, their decoder alone (BartForCausalLM: no
    # encoder, half the parameters), which the first-head rule built; T5 has none
    small = {"encoder_layers": 1, "decoder_layers": 1, "d_model": 32,
             "encoder_attention_heads": 2, "decoder_attention_heads": 2,
             "encoder_ffn_dim": 64, "decoder_ffn_dim": 64, "vocab_size": VOCAB}
    bart = hf_model("bart", **small)
    assert type(bart).__name__ == "BartForConditionalGeneration"
    assert hasattr(bart.model, "encoder") and hasattr(bart.model, "decoder")
    # Whisper's speech head is no seq2seq-LM class: its base model holds both halves
    whisper = hf_model("whisper", pad_token_id=0, bos_token_id=1, eos_token_id=2,
                       decoder_start_token_id=1, **small)
    assert type(whisper).__name__ == "WhisperModel"
    # it takes audio features: token ids are refused, naming them (they failed in its encoder
    # with "'NoneType' object has no attribute 'shape'")
    with pytest.raises(ValueError, match="WhisperModel takes input_features, not token ids"):
        text_inputs(whisper, 1, 4)
    # the decoder alone when asked for
    assert type(hf_model("bart", task="causal-lm", **small)).__name__ == "BartForCausalLM"


def test_task_from_the_command_line(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["hf:bert", "-i", "1x8", "--arg", "num_hidden_layers=1", "--arg", "hidden_size=32",
            "--arg", "num_attention_heads=2", "--arg", "intermediate_size=64", "--depth", "0"]
    assert main(argv) == 0 and "(BertModel)" in capsys.readouterr().out
    assert main([*argv, "--arg", "task=causal-lm"]) == 0
    assert "(BertLMHeadModel)" in capsys.readouterr().out


def test_an_override_the_configuration_does_not_define_is_refused(tmp_path: Path) -> None:
    # `nlayer` (a typo of n_layer) used to build the full 124M-parameter GPT-2, silently
    with pytest.raises(ConfigFieldError, match=r"GPT2Config defines no 'nlayer' \(did you "
                                               r"mean 'n_layer'\?\)") as caught:
        hf_config("gpt2", nlayer=2)
    assert caught.value.fields == ("nlayer",) and isinstance(caught.value, ValueError)
    with pytest.raises(ConfigFieldError, match="nlayer"):
        hf_model("gpt2", nlayer=2)
    # the generic names a configuration maps (num_hidden_layers -> n_layer) are fields too
    assert hf_config("gpt2", num_hidden_layers=2, attn_implementation="eager").n_layer == 2
    # a config.json's overrides, and a configuration object's, are checked the same way
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "gpt2", "n_layer": 3}))
    with pytest.raises(ConfigFieldError, match="'hiden_size' \\(did you mean 'hidden_size'"):
        hf_config(tmp_path, hiden_size=8)
    with pytest.raises(ConfigFieldError, match="zzz"):
        hf_config(hf_config(tmp_path), zzz=1)
    # keys of the file itself are the file's business: only what we add is checked
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "gpt2", "n_ctx": 64}))
    assert hf_config(tmp_path, n_layer=1).n_layer == 1


def test_the_command_line_names_the_mistyped_arg(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["hf:gpt2", "-i", "1x8", "--arg", "nlayer=2"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("moduleprofiler: error: hf:gpt2: --arg nlayer: GPT2Config defines "
                          "no 'nlayer' (did you mean 'n_layer'?)"), err


def test_a_padding_token_outside_a_smaller_vocabulary_is_named() -> None:
    # Phi-3 pads with token 32,000 and Whisper with 50,256: with vocab_size=100 the embedding
    # asserted "Padding_idx must be within num_embeddings", naming neither field
    with pytest.raises(ValueError, match=r"Phi3Config: pad_token_id=32000 is not a token of "
                                         r"vocab_size=100 .* give pad_token_id= inside"):
        hf_model("phi3", vocab_size=100, num_hidden_layers=2)
    with pytest.raises(ValueError, match=r"WhisperConfig: pad_token_id=50256 is not a token of "
                                         r"vocab_size=100"):
        hf_model("whisper", vocab_size=100)
    # a padding token inside the vocabulary (or none) builds; 100 tokens x hidden 3,072
    model = hf_model("phi3", vocab_size=100, num_hidden_layers=2, pad_token_id=99)
    assert model.model.embed_tokens.weight.shape == (100, 3_072)
    assert hf_model("phi3", vocab_size=100, num_hidden_layers=2, pad_token_id=None) is not None


def test_token_inputs_of_an_offloaded_model_are_where_its_hooks_run_it() -> None:
    accelerate = pytest.importorskip("accelerate")
    model = hf_model("gpt2", device="cpu", n_layer=1, n_embd=16, n_head=2, vocab_size=100,
                     n_positions=16)
    accelerate.cpu_offload(model, execution_device=torch.device("cpu"))
    assert next(model.parameters()).device.type == "meta"  # the weights wait there
    # the device rule of every pass: made on meta, the ids were zeros the model cannot run on
    ids = text_inputs(model, 2, 5)["input_ids"]
    assert ids.device.type == "cpu" and ids.shape == (2, 5) and bool(ids.any())
    assert model(ids).logits.shape == (2, 5, 100)
