"""Every rendering option against every output of the command line: taken where the output
has a place for it, refused (naming both) where it would be dropped in silence."""

from __future__ import annotations

from pathlib import Path

import pytest

from moduleprofiler.cli import main
from moduleprofiler.cli_formats import FORMAT_SUFFIXES, RENDER_FLAGS
from moduleprofiler.cli_options import CliError, parse_options

ROOT = Path(__file__).resolve().parent.parent
TINY = f"{ROOT / 'tests/export/cli_models.py'}:tiny"
MODEL = [TINY, "-i", "2x4"]
SWEEP = [*MODEL, "--predict", "H100 SXM", "--batch", "1,8"]
GENERATE = ["hf:gpt2", "-i", "1x8", "--device", "cpu", "--generate", "2"]

FLAG_ARGS = {"--title": ["--title", "T"], "--caption": ["--caption", "C"],
             "--label": ["--label", "tab:t"], "--width": ["--width", "60"],
             "--unicode": ["--unicode"], "--no-fold": ["--no-fold"],
             "--color": ["--color", "never"]}

OUTPUTS: list[tuple[list[str], set[str], str]] = [
    # (the command line, the rendering options its output takes, how the refusal names it)
    (MODEL, {"--width", "--unicode", "--no-fold", "--color"}, "the text on the terminal"),
    ([*MODEL, "-o", "t.txt"], {"--width", "--unicode", "--no-fold"}, "-o t.txt"),
    ([*MODEL, "-f", "csv"], set(), "--format csv"),
    ([*MODEL, "-o", "t.md"], set(), "-o t.md"),
    ([*MODEL, "-o", "t.tex"], {"--caption", "--label", "--no-fold"}, "-o t.tex"),
    ([*MODEL, "-f", "json"], set(), "--format json"),
    ([*MODEL, "-o", "t.html"], {"--title"}, "-o t.html"),
    ([*MODEL, "-o", "t.png"], {"--title"}, "-o t.png"),
    ([*MODEL, "--by-operator"], {"--width", "--unicode", "--color"}, "the text on the terminal"),
    ([*MODEL, "--by-operator", "-o", "o.tex"], {"--caption", "--label"}, "-o o.tex"),
    ([*MODEL, "--per", "call"], set(), "--per call"),
    (SWEEP, {"--width", "--unicode", "--color"}, "--batch (the text on the terminal)"),
    ([*SWEEP, "-o", "s.tex"], {"--caption", "--label"}, "--batch (-o s.tex)"),
    ([*SWEEP, "-f", "json"], set(), "--batch (--format json)"),
    ([*SWEEP, "-o", "s.png"], {"--title"}, "--batch (-o s.png)"),
    (GENERATE, {"--width"}, "--generate (the text on the terminal)"),
    ([*GENERATE, "-f", "csv"], set(), "--generate (--format csv)"),
    (["hf:gpt2", "--kv-cache", "128"], set(), "--kv-cache"),
]


@pytest.mark.parametrize("flag", list(FLAG_ARGS))
@pytest.mark.parametrize(("argv", "taken", "target"), OUTPUTS,
                         ids=[" ".join(argv[3:]) or "text" for argv, _, _ in OUTPUTS])
def test_each_rendering_option_is_taken_or_refused(argv: list[str], taken: set[str],
                                                   target: str, flag: str) -> None:
    if flag in taken:
        parse_options([*argv, *FLAG_ARGS[flag]])
        return
    with pytest.raises(CliError) as error:  # e.g. --title in CSV was dropped in silence
        parse_options([*argv, *FLAG_ARGS[flag]])
    assert str(error.value) == f"{flag} does not apply to {target} ({flag} is for " \
                               f"{RENDER_FLAGS[flag]})"


def test_the_rendering_options_are_the_parsers() -> None:
    from moduleprofiler.cli_options import build_parser

    flags = {option for action in build_parser()._actions for option in action.option_strings}
    assert set(RENDER_FLAGS) <= flags


def test_the_format_copy_agrees_with_the_format_table() -> None:
    from moduleprofiler.export.format_table import FORMATS

    assert FORMAT_SUFFIXES == {name: entry.suffixes for name, entry in FORMATS.items()}


@pytest.mark.parametrize(("flags", "said"), [
    (["--sort", "ops"], "--sort"), (["--depth", "1"], "--depth"), (["--top", "3"], "--top"),
    (["--min-pct", "5"], "--min-pct"), (["--include", "0"], "--include"),
    (["--exclude", "0"], "--exclude"), (["--what", "params,time"], "--what params"),
    (["--by-operator", "0"], "--by-operator 0"),
])
@pytest.mark.parametrize("fmt", ["json", "html"])
def test_a_whole_profile_file_refuses_what_shapes_a_table(flags: list[str], said: str,
                                                          fmt: str) -> None:
    # -f json --sort ops wrote the JSON as ever: the options that shape a table were dropped
    with pytest.raises(CliError, match=f"--format {fmt} writes the whole profile.*not a table: "
                                       f"{said} does not apply"):
        parse_options([*MODEL, "-f", fmt, *flags])


def test_a_whole_profile_file_takes_the_passes_what_picks() -> None:
    # --what time, memory and backward run the passes whose columns the file holds
    parse_options([*MODEL, "-f", "json", "--what", "time,memory,backward,self_backward_flops"])
    parse_options([*MODEL, "-o", "r.html", "--what", "backward"])
    parse_options([*MODEL, "-f", "json", "--by-operator"])  # the JSON holds the operators
    with pytest.raises(CliError, match="--format html writes the whole profile's report, not "
                                       "a table: --by-operator does not apply"):
        parse_options([*MODEL, "-f", "html", "--by-operator"])  # the report shows none
    with pytest.raises(CliError, match="--per call writes every column, not a table: --what "
                                       "params does not apply"):
        parse_options([*MODEL, "--per", "call", "--what", "params,time"])


@pytest.mark.parametrize("fmt", ["csv", "md", "tex", "txt"])
def test_a_table_format_takes_what_shapes_a_table(fmt: str) -> None:
    for flags in (["--sort", "ops", "--depth", "1"], ["--top", "3"], ["--include", "0"],
                  ["--what", "params"], ["--by-operator", "0"]):
        parse_options([*MODEL, "-o", f"t.{fmt}", *flags])


def test_a_refused_combination_runs_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    # the error comes before the model is built: one line, status 2
    assert main([*MODEL, "-f", "csv", "--title", "T"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err == ("moduleprofiler: error: --title does not apply to --format "
                                 "csv (--title is for the HTML report and figures)\n")
