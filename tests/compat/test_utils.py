"""0.0.4's audio helpers share one frames-per-second definition, 0.0.4's own."""

from __future__ import annotations

import pytest

from moduleprofiler.compat.utils import frames_per_second, ops_to_flops, realtime_factor


def test_frames_per_second_counts_whole_frames_in_one_second() -> None:
    # (16000 - 512) / 256 + 1 = 15488 / 256 + 1 = 60.5 + 1 = 61.5
    assert frames_per_second(16000, 512, 256) == 61.5
    # hop defaults to the frame: (16000 - 160) / 160 + 1 = 99 + 1 = 100
    assert frames_per_second(16000, 160) == 100.0


def test_ops_to_flops_with_overlapping_frames() -> None:
    # 61.5 frames/s * 1000 ops per frame = 61500 ops/s
    assert ops_to_flops(1000, 16000, 512, hop_size=256) == 61500.0


def test_realtime_factor_uses_the_same_frames_per_second() -> None:
    # 61.5 frames/s * 2 ms = 123 ms busy per second of audio: 1000 / 123 times real time
    # (with sample_rate / hop = 62.5 frames/s it would be 1000 / 125 = 8.0)
    assert realtime_factor(2.0, 16000, 512, hop_size=256) == pytest.approx(1000 / 123)
    assert realtime_factor(2.0, 16000, 512, hop_size=256, inverse=True) == pytest.approx(0.123)
    # the two helpers agree: ops per second / ops per frame = frames per second
    assert realtime_factor(4.0, 48000, 960, 480) == pytest.approx(
        1000 / (4.0 * ops_to_flops(1, 48000, 960, 480)))


def test_a_frame_longer_than_a_second_is_refused_naming_the_argument() -> None:
    with pytest.raises(ValueError, match="frame_size must not exceed sample_rate"):
        ops_to_flops(1000, 160, 16000)
    with pytest.raises(ValueError, match="frame_size must not exceed sample_rate"):
        realtime_factor(2.0, 160, 16000)


def test_make_list_wraps_as_004() -> None:
    from moduleprofiler.utils import make_list

    items = [1, 2]
    assert make_list(items) is items  # a list is returned as it is
    assert make_list(3) == [3]
    assert make_list((1, 2)) == [(1, 2)]  # a tuple is one item, not unpacked
    assert make_list(None) is None


def test_dict_key_helpers_read_the_query_dict_as_004() -> None:
    from moduleprofiler.utils import dict_keys_common, dict_keys_diff

    current = {"a": 1, "b": 2, "c": 3}
    query = {"c": 0, "a": 0, "z": 0}
    # keys of query found in current, in query's order; then the ones it lacks
    assert dict_keys_common(current, query) == ["c", "a"]
    assert dict_keys_diff(current, query) == ["z"]
    assert dict_keys_diff(input={"a": 1, "b": 2}, query={"b": 0, "c": 0, "d": 0}) == ["c", "d"]


def test_dict_merge_adds_missing_keys_in_place_and_refuses_a_conflict() -> None:
    from moduleprofiler.utils import dict_merge

    ops = {"type": "Linear", "ops": 140}
    merged = dict_merge(ops, {"type": "Linear", "input_size": (2, 5)})
    assert merged is ops  # 0.0.4 merged into its first argument
    assert ops == {"type": "Linear", "ops": 140, "input_size": (2, 5)}
    with pytest.raises(ValueError, match=r"key 'ops' has different values"):
        dict_merge(input=ops, other={"ops": 70, "macs": 70})
    assert "macs" not in ops  # nothing added when refused
