"""The command line's hf: source: Transformers models by name or local config.json, on meta
unless a device is named, with token inputs of -i BATCHxTOKENS."""

from __future__ import annotations

import io
import json
import warnings
from pathlib import Path

import pandas as pd
import pytest

from moduleprofiler.cli import main
from tests.language.tiny import VOCAB

TINY = ["--arg", "n_layer=2", "--arg", "n_embd=64", "--arg", "n_head=4",
        "--arg", f"vocab_size={VOCAB}"]
# GPT-2 over 8 tokens: 2 layers x 8 x 12 x 64^2 + attention 2 x 2 x 8 x 8 x 64
# + lm_head 8 x 64 x 100 = 786,432 + 16,384 + 51,200 = 854,016 MACs
MACS = 2 * 8 * 12 * 64 * 64 + 2 * 2 * 8 * 8 * 64 + 8 * 64 * VOCAB


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    status = main(list(argv))
    out, err = capsys.readouterr()
    return status, out, err


def test_a_model_by_name_on_meta(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert MACS == 854_016
    status, _, err = run(capsys, "hf:gpt2", "-i", "1x8", *TINY, "-o",
                           str(tmp_path / "gpt2.csv"))
    assert status == 0, err
    root = pd.read_csv(tmp_path / "gpt2.csv").iloc[0]
    assert root["type"] == "GPT2LMHeadModel"
    assert root["macs"] == MACS


def test_time_of_a_model_built_on_meta_says_how_to_time_it(
        capsys: pytest.CaptureFixture[str]) -> None:
    # an hf: model is built on meta unless --device names another: --what time can't run
    # there, and the note said only "not measurable on the meta device", a device the user
    # never named
    status, out, err = run(capsys, "hf:gpt2", "-i", "1x8", *TINY, "--what", "params,time",
                           "--depth", "0")
    assert status == 0, err
    assert ("time: not measurable on the meta device, where an hf: model is built unless "
            "--device names another (add --device cpu or --device cuda to time it)") in err
    assert out.splitlines()[0].split() == ["module", "params"]


def test_a_local_config_on_cpu_with_a_training_step(capsys: pytest.CaptureFixture[str],
                                                    tmp_path: Path) -> None:
    config = {"model_type": "gpt2", "n_layer": 2, "n_embd": 64, "n_head": 4,
              "vocab_size": VOCAB}
    (tmp_path / "config.json").write_text(json.dumps(config))
    status, out, err = run(capsys, f"hf:{tmp_path / 'config.json'}", "-i", "1x8",
                           "--device", "cpu", "--what", "macs,backward", "--depth", "0",
                           "--format", "csv")
    assert status == 0, err
    root = pd.read_csv(io.StringIO(out)).iloc[0]
    assert root["macs"] == MACS
    # with labels the model returns its loss; every matrix product has two gradient products
    # of its size (inputs and weights), the embedding's gradient is an index add: 2 x MACS
    assert root["backward_macs"] == 2 * MACS


def test_errors(capsys: pytest.CaptureFixture[str]) -> None:
    status, _, err = run(capsys, "hf:no-such-model")
    assert status == 2 and "unknown model type 'no-such-model'" in err
    status, _, err = run(capsys, "hf:gpt2", "-i", "1x3x4")
    assert status == 2 and "BATCHxTOKENS" in err


def test_generation_step_by_step(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    status, _, err = run(capsys, "hf:gpt2", "-i", "1x8", *TINY, "--device", "cpu",
                         "--generate", "3", "-o", str(tmp_path / "steps.json"))
    assert status == 0, err
    written = json.loads((tmp_path / "steps.json").read_text())
    steps = written["steps"]
    assert [s["phase"] for s in steps] == ["prefill", "decode", "decode"]
    assert [s["context_tokens"] for s in steps] == [8, 9, 10]
    # generate keeps only the last position's logits: the prefill is the forward on the prompt
    # less 7 positions of lm_head (7 x 64 x VOCAB)
    assert steps[0]["macs"] == MACS - 7 * 64 * VOCAB
    # a decode step: one token through 2 layers (12 x 64^2 each) and lm_head, plus attention
    # over the context: 2 layers x 2 (scores and values) x 64 per cached token
    for step in steps[1:]:
        assert step["macs"] == 2 * 12 * 64 * 64 + 64 * VOCAB + 2 * 2 * 64 * step["context_tokens"]
    assert written["summary"]["new_tokens"] == 3
    assert written["summary"]["macs"] == sum(s["macs"] for s in steps)
    status, out, _ = run(capsys, "hf:gpt2", "-i", "1x8", *TINY, "--device", "cpu",
                         "--generate", "2")
    assert status == 0 and "prefill" in out and "decode" in out and "flops_per_token" in out


def test_generation_needs_a_real_device(capsys: pytest.CaptureFixture[str]) -> None:
    status, _, err = run(capsys, "hf:gpt2", "-i", "1x8", *TINY, "--generate", "3")
    assert status == 2 and "--generate runs the model: name a real --device" in err
    status, _, err = run(capsys, "hf:gpt2", "-i", "1x8", *TINY, "--generate", "0")
    assert status == 2 and "--generate must be at least 1" in err


def test_generation_runs_in_the_dtype_asked_for(capsys: pytest.CaptureFixture[str]) -> None:
    # --dtype bfloat16 was dropped: the model generated in float32, its cache 8,192 bytes
    base = ["hf:gpt2", "-i", "1x8", *TINY, "--device", "cpu", "--generate", "1", "-f", "json"]
    status, out, err = run(capsys, *base, "--dtype", "bfloat16")
    assert status == 0, err
    # the prefill's cache: 8 tokens x 2 layers x (key + value) x 64 x 2 bytes = 4,096
    assert json.loads(out)["steps"][0]["kv_cache_bytes"] == 8 * 2 * 2 * 64 * 2
    status, out, _ = run(capsys, *base)  # float32: 4 bytes a number
    assert json.loads(out)["steps"][0]["kv_cache_bytes"] == 8 * 2 * 2 * 64 * 4
    status, _, err = run(capsys, *base, "--dtype", "int64")
    assert status == 2 and "--dtype int64: --generate casts the model's floating" in err
    # a device torch does not know was a traceback
    status, _, err = run(capsys, "hf:gpt2", "-i", "1x8", *TINY, "--device", "bogus",
                         "--generate", "1")
    assert status == 2 and err.startswith("moduleprofiler: error: bad --device 'bogus'")


@pytest.mark.parametrize("flags", [["-i", "1x8"], ["--kv-cache", "8"]])
def test_an_override_the_configuration_refuses_is_one_line(capsys: pytest.CaptureFixture[str],
                                                           flags: list[str]) -> None:
    # Transformers' own type check of a field escaped as a traceback
    status, out, err = run(capsys, "hf:gpt2", *flags, "--arg", "n_layer=x")
    assert status == 2 and out == "" and err.count("\n") == 1
    assert err.startswith("moduleprofiler: error: hf:gpt2: --arg n_layer: the configuration "
                          "raised ")
    assert "'n_layer'" in err


def test_generation_refuses_the_options_it_would_ignore(
        capsys: pytest.CaptureFixture[str]) -> None:
    # before: --depth and --what ops were silently ignored and the steps table printed; they
    # are refused before the model is built
    base = ["hf:gpt2", "-i", "1x8", *TINY, "--device", "cpu", "--generate", "2"]
    status, out, err = run(capsys, *base, "--depth", "1")
    assert status == 2 and out == ""
    assert "--generate prints one row per generation step, not modules: --depth does not " \
        "apply" in err
    status, _, err = run(capsys, *base, "--top", "3", "--include", "h.*")
    assert status == 2 and "--top, --include does not apply" in err
    status, _, err = run(capsys, *base, "--what", "time,ops")
    assert status == 2 and "--generate --what takes time and/or memory" in err
    assert err.rstrip().endswith("not ops")


def test_an_encoder_decoder_generates_from_its_padding_token(
        capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = run(capsys, "hf:t5", "-i", "1x6", "--arg", "num_layers=1",
                           "--arg", "d_model=32", "--arg", "d_ff=64", "--arg", "num_heads=2",
                           "--arg", "d_kv=16", "--arg", f"vocab_size={VOCAB}", "--device", "cpu",
                           "--generate", "2", "-f", "csv")
    assert status == 0, err
    steps = pd.read_csv(io.StringIO(out))
    # generate runs the encoder once, then one decoder step per new token
    assert list(steps["phase"]) == ["encode", "prefill", "decode"]
    assert list(steps["input_tokens"]) == [6, 1, 1]


def test_generation_table_fits_the_width(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = run(capsys, "hf:gpt2", "-i", "1x8", *TINY, "--device", "cpu",
                           "--generate", "2", "--width", "60")
    assert status == 0, err
    lines = out.splitlines()
    assert max(len(line) for line in lines) <= 60
    header = lines[0].split()
    assert header[:3] == ["step", "phase", "module"] and "FLOPs" in header
    # the prefill's FLOPs in SI units: 2 x (MACS - 7 x 64 x VOCAB) (see the test above)
    prefill = lines[2].split()
    assert prefill[:2] == ["0", "prefill"]
    flops = 2 * (MACS - 7 * 64 * VOCAB)
    assert f"{flops / 1e6:.2f}M" in prefill
    # the columns that did not fit are named, and the exact totals follow
    assert "hidden to fit 60 columns: complete, batch" in " ".join(out.split())
    assert f"prefill_flops {flops:,}" in " ".join(out.split())


def test_kv_cache_from_the_command_line(capsys: pytest.CaptureFixture[str]) -> None:
    # Llama-2-7B's configuration, 32 layers x 32 key/value heads x head
    # size 128: 2 x 32 x 32 x 128 = 262,144 values a token; float16 2 bytes = 524,288 bytes,
    # x 4,096 tokens = 2,147,483,648 bytes = 2 GiB
    status, out, _ = run(capsys, "hf:llama", "--kv-cache", "4096", "--dtype", "float16")
    assert status == 0
    assert out.splitlines()[1:] == ["dtype: float16 (--dtype)",
                                    "per token: 524,288 bytes (512.00 KiB)",
                                    "4,096 tokens: 2,147,483,648 bytes (2.00 GiB)"]
    # no dtype in the configuration, none given: float32 assumed, and said
    status, out, _ = run(capsys, "hf:gpt2", "--kv-cache", "1024", "--arg", "n_layer=2")
    # 2 x 2 layers x 12 heads x 64 x 4 bytes = 12,288 a token; x 1,024 = 12,582,912
    assert status == 0 and "dtype: float32 (assumed: the configuration names none" in out
    assert "1,024 tokens: 12,582,912 bytes (12.00 MiB)" in out


def test_kv_cache_of_a_sliding_window_model(capsys: pytest.CaptureFixture[str]) -> None:
    # Mistral-7B: 2 x 32 layers x 8 key/value heads x 128 x 2 bytes = 131,072 bytes a token;
    # its layers slide over 4,096 tokens: at 32,768 tokens 131,072 x 4,096 = 512 MiB, not
    # 131,072 x 32,768 = 4 GiB
    status, out, _ = run(capsys, "hf:mistral", "--kv-cache", "32768", "--dtype", "bfloat16")
    assert status == 0
    assert out.splitlines() == [
        "KV cache of hf:mistral (MistralConfig), one sequence",
        "dtype: bfloat16 (--dtype)",
        "per token: 131,072 bytes (128.00 KiB)",
        "32,768 tokens: 536,870,912 bytes (512.00 MiB)",
        "sliding-window layers hold at most their window: less than per token x tokens"]


def test_kv_cache_takes_the_configurations_dtype(capsys: pytest.CaptureFixture[str],
                                                 tmp_path: Path) -> None:
    from moduleprofiler.language import hf_config

    config = hf_config("llama", num_hidden_layers=2, num_attention_heads=4,
                       num_key_value_heads=2, hidden_size=64)
    config.dtype = "bfloat16"
    config.save_pretrained(tmp_path)
    status, out, _ = run(capsys, f"hf:{tmp_path / 'config.json'}", "--kv-cache", "8")
    # 2 x 2 layers x 2 kv heads x 16 x 2 bytes = 256 a token; x 8 = 2,048
    assert status == 0 and out.splitlines()[1:] == [
        "dtype: bfloat16 (the configuration's)", "per token: 256 bytes (256 B)",
        "8 tokens: 2,048 bytes (2.00 KiB)"]


def test_kv_cache_of_an_encoder_decoder_says_its_cross_attention_part(
        capsys: pytest.CaptureFixture[str]) -> None:
    # T5-small: 6 decoder layers x 8 heads x d_kv 64, float32: 2 x 6 x 8 x 64 x 4 = 24,576
    # bytes per decoder token, and as many per encoder token for the cross-attention
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        status, out, _ = run(capsys, "hf:t5", "--kv-cache", "100")
    assert status == 0 and not [w for w in caught if "encoder" in str(w.message)]
    assert "100 tokens: 2,457,600 bytes" in out
    assert "plus cross-attention: 24,576 bytes (24.00 KiB) per encoder token" in out


def test_kv_cache_needs_a_configuration(capsys: pytest.CaptureFixture[str]) -> None:
    status, _, err = run(capsys, "torchvision.models:resnet18", "--kv-cache", "10")
    assert status == 2 and "--kv-cache needs an hf: model" in err
    status, _, err = run(capsys, "hf:llama", "--kv-cache", "0")
    assert status == 2 and "--kv-cache must be at least 1, got 0" in err


def test_kv_cache_refuses_the_options_it_would_ignore(capsys: pytest.CaptureFixture[str],
                                                      tmp_path: Path) -> None:
    # before: -i 4x128 printed one sequence's cache (batch 4 ignored), and -o kv.json and
    # --format csv wrote the four text lines under those names; now each is refused
    base = ["hf:llama", "--kv-cache", "4096"]
    status, out, err = run(capsys, *base, "-i", "4x128")
    assert status == 2 and out == ""
    assert "--kv-cache predicts one sequence's cache from the configuration alone (nothing " \
        "is built or run): -i does not apply" in err
    status, _, err = run(capsys, *base, "--what", "params", "--depth", "1",
                         "--predict", "H100 SXM")
    assert status == 2 and "--what, --depth, --predict does not apply" in err
    status, _, err = run(capsys, *base, "-o", str(tmp_path / "kv.json"))
    assert status == 2 and "--kv-cache writes text, not json" in err
    assert not (tmp_path / "kv.json").exists()
    status, _, err = run(capsys, *base, "--format", "csv")
    assert status == 2 and "--kv-cache writes text, not csv" in err
    status, _, err = run(capsys, *base, "-o", str(tmp_path / "kv.png"))
    assert status == 2 and "-o FIGURE does not apply" in err
    # nothing is built: a device was dropped in silence
    status, _, err = run(capsys, *base, "--device", "cuda:0")
    assert status == 2 and "(nothing is built or run): --device does not apply" in err
    status, _, err = run(capsys, *base, "--meta")
    assert status == 2 and "(nothing is built or run): --meta does not apply" in err
    # text, to a file too: 2 x 32 layers x 32 heads x 128 x 4 bytes = 1,048,576 a token
    status, _, err = run(capsys, *base, "-o", str(tmp_path / "kv.txt"))
    assert status == 0, err
    assert "per token: 1,048,576 bytes" in (tmp_path / "kv.txt").read_text()


def test_generation_refuses_a_prediction(capsys: pytest.CaptureFixture[str]) -> None:
    # before: --predict was ignored and the measured steps printed as if nothing were amiss
    status, out, err = run(capsys, "hf:gpt2", "-i", "1x8", *TINY, "--device", "cpu",
                           "--generate", "2", "--predict", "H100 SXM")
    assert status == 2 and out == ""
    assert "--generate measures a run; --predict predicts one without running: use one of " \
        "them" in err


def test_a_model_that_takes_no_token_ids_is_refused(capsys: pytest.CaptureFixture[str]
                                                    ) -> None:
    status, out, err = run(capsys, "hf:whisper", "-i", "1x8", "--arg", "encoder_layers=1",
                           "--arg", "decoder_layers=1")
    assert status == 2 and out == ""
    assert "WhisperModel takes input_features, not the token ids -i BATCHxTOKENS makes" in err


def test_generation_refuses_what_it_cannot_write_before_it_runs(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
        tmp_path: Path) -> None:
    # -o steps.html was refused only after the generation had run; -o steps.png said
    # "unknown format '.png' ... figures: png, svg, pdf"
    import moduleprofiler.cli as cli

    def must_not_run(options: object) -> None:
        raise AssertionError("the generation ran")

    monkeypatch.setattr(cli, "run_generation", must_not_run)
    base = ["hf:gpt2", "-i", "1x8", *TINY, "--device", "cpu", "--generate", "2"]
    status, _, err = run(capsys, *base, "-o", str(tmp_path / "steps.html"))
    assert status == 2 and "--generate writes text, csv or json, not html" in err
    status, _, err = run(capsys, *base, "-o", str(tmp_path / "steps.png"))
    assert status == 2 and "-o FIGURE does not apply" in err


def test_generation_refuses_a_title(capsys: pytest.CaptureFixture[str]) -> None:
    # the steps table has no title or caption: they were said ignored and the model generated
    status, out, err = run(capsys, "hf:gpt2", "-i", "1x8", *TINY, "--device", "cpu",
                           "--generate", "1", "--title", "T", "--caption", "C")
    assert status == 2 and out == ""
    assert "--title, --caption do not apply to --generate (the text on the terminal)" in err


def test_the_steps_totals_line_has_one_number_format() -> None:
    from moduleprofiler.language.steps_text import _total

    # a per-token mean beside an integer total: separators, no exponent (it read 7.10242e+06)
    assert _total(21_307_264) == "21,307,264"
    assert _total(21_307_264 / 3) == "7,102,421.3"
    assert _total(10_240.0) == "10,240"
    assert _total(0.0123456789) == "0.0123457"
