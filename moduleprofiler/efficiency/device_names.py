"""Device names -> the cards of the peak table: the one lookup every device name goes through
(peaks for MFU and the roofline, the predictor's device model, calibrations, a measured
profile's GPU).

A name is read word by word, case aside: ``-`` and ``_`` separate words as spaces do, a
leading vendor word (``NVIDIA``, ``Tesla``, ``GeForce``, ``AMD``, ``Instinct``) and the word
``GPU`` are dropped, ``80 GB`` is ``80GB``. What is left must be a chip of the table
(``H100``, ``RTX 4090``) followed only by words that some card of that chip is named with:
its form factor (``SXM5``, ``PCIe``, ``NVL``), memory size (``80GB``) or memory type
(``HBM3``), as ``torch.cuda.get_device_name()`` reports them (``"NVIDIA H100 80GB HBM3"``,
``"NVIDIA A100-SXM4-40GB"``). A word no card of the chip is named with makes the name another
device (``"H200 NVL"``, ``"RTX 4090 D"``, ``"H200 XYZ"``): it is never matched by the part of
it the table knows.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass

_VENDOR_WORDS = frozenset({"NVIDIA", "TESLA", "GEFORCE", "AMD", "INSTINCT"})
"""Words a name may start with that say the vendor or the product line, not the card."""
_NOISE_WORDS = frozenset({"GPU"})
"""Words that say nothing about which card (``"RTX 4090 GPU"``)."""


@dataclass(frozen=True)
class Card:
    """One card of the peak table: its table name, its chip's words and the other words its
    names may carry."""

    table_name: str
    chip: str
    words: frozenset[str]


def _card(table_name: str, chip: str, words: str = "") -> Card:
    return Card(table_name, chip, frozenset(words.split()))


CARDS: tuple[Card, ...] = (
    # CUDA names the H100 SXM "NVIDIA H100 80GB HBM3", the others "NVIDIA H100 PCIe" / "NVL"
    _card("H100 SXM", "H100", "SXM SXM5 80GB HBM3"),
    _card("H100 PCIe", "H100", "PCIE 80GB HBM2E"),
    _card("H100 NVL", "H100", "NVL 94GB"),
    _card("H200", "H200", "SXM SXM5 141GB HBM3E"),  # the SXM card; not the H200 NVL
    _card("B200", "B200", "SXM SXM6 180GB 192GB HBM3E"),
    # SXM and PCIe 40GB cards: the same peaks
    _card("A100 40GB", "A100", "SXM SXM4 PCIE 40GB HBM2"),
    _card("A100 80GB SXM", "A100", "SXM SXM4 80GB HBM2E"),
    _card("A100 80GB PCIe", "A100", "PCIE 80GB HBM2E"),
    _card("L40S", "L40S", "48GB"),
    _card("L4", "L4", "24GB"),
    _card("A10", "A10", "24GB"),
    _card("V100 SXM2", "V100", "SXM SXM2 16GB 32GB"),  # "Tesla V100-SXM2-32GB"
    _card("V100 PCIe", "V100", "PCIE 16GB 32GB"),
    _card("T4", "T4", "16GB"),
    _card("RTX A6000", "RTX A6000", "48GB"),
    _card("RTX 3090", "RTX 3090", "24GB"),
    _card("RTX 4090", "RTX 4090", "24GB"),
    _card("MI300X", "MI300X", "192GB VF OAM"),  # VF: a virtual function of one (a cloud VM)
)
"""Every card of the peak table (tests hold these and ``DEVICE_PEAKS`` to the same names)."""


class DeviceNameError(ValueError):
    """A device name that does not name exactly one card of the peak table. ``name`` is the
    name given, ``candidates`` the table names it could mean (ambiguous) or the close ones
    (unknown), ``argument`` the argument it was given as."""

    def __init__(self, message: str, name: str, candidates: tuple[str, ...],
                 argument: str) -> None:
        super().__init__(message)
        self.name = name
        self.candidates = candidates
        self.argument = argument


class AmbiguousDeviceError(DeviceNameError):
    """A device name that several cards of the peak table answer to (``"H100"``: the SXM,
    PCIe and NVL cards, whose peaks differ); :attr:`candidates` are their table names."""

    def __init__(self, name: str, candidates: tuple[str, ...], argument: str = "device"
                 ) -> None:
        super().__init__(f"{argument} {name!r} could be any of {', '.join(candidates)}, whose "
                         f"peaks differ: name the card (e.g. {argument}="
                         f"{candidates[0]!r})", name, candidates, argument)


class UnknownDeviceError(DeviceNameError):
    """A device name that no card of the peak table answers to (``"H200 XYZ"``, ``"A10G"``);
    :attr:`candidates` are the table names close to it (possibly none)."""

    def __init__(self, name: str, candidates: tuple[str, ...], argument: str = "device",
                 known: tuple[str, ...] = ()) -> None:
        close = f"close: {', '.join(candidates)}; " if candidates else ""
        super().__init__(f"{argument} {name!r} is not in the peak table ({close}known: "
                         f"{', '.join(known or table_names())}): pass a DevicePeaks, or "
                         "measure it with moduleprofiler.efficiency.measure_peaks()",
                         name, candidates, argument)


def table_names() -> tuple[str, ...]:
    """The table names of :data:`CARDS`, in table order."""
    return tuple(card.table_name for card in CARDS)


def name_words(name: str) -> list[str]:
    """The words of a device name that can say the card (upper case, vendor words dropped):
    ``"NVIDIA A100-SXM4-80GB"`` -> ``["A100", "SXM4", "80GB"]``."""
    text = re.sub(r"[-_]", " ", name.upper())
    text = re.sub(r"\b(\d+)\s+GB\b", r"\1GB", text)
    words = text.split()
    while words and words[0] in _VENDOR_WORDS:
        words.pop(0)
    return [word for word in words if word not in _NOISE_WORDS]


def _chip_cards(words: list[str]) -> tuple[list[Card], list[str]]:
    """The cards of the chip the words start with, and the words after the chip."""
    for size in (2, 1):  # "RTX 4090" before "RTX"
        chip = " ".join(words[:size])
        cards = [card for card in CARDS if card.chip == chip]
        if cards and len(words) >= size:
            return cards, words[size:]
    return [], words


def matching_devices(name: str) -> tuple[str, ...]:
    """The table names ``name`` may mean: one, several (the name does not say which card:
    ``"H100"``) or none (not in the table: ``"H200 NVL"``, ``"H200 XYZ"``)."""
    if any(card.table_name == name for card in CARDS):
        return (name,)
    cards, rest = _chip_cards(name_words(name))
    return tuple(card.table_name for card in cards if all(word in card.words for word in rest))


def close_devices(name: str) -> tuple[str, ...]:
    """Table names close to a name no card answers to: the cards of its chip, else the names
    spelled most like it."""
    cards, _ = _chip_cards(name_words(name))
    if cards:
        return tuple(card.table_name for card in cards)
    by_upper = {known.upper(): known for known in table_names()}
    spelled = difflib.get_close_matches(" ".join(name_words(name)), list(by_upper), n=3,
                                        cutoff=0.6)
    return tuple(by_upper[close] for close in spelled)


def match_device(name: str, argument: str = "device") -> str | None:
    """The table name for a device name as CUDA reports it (``"NVIDIA H100 80GB HBM3"`` ->
    ``"H100 SXM"``), or ``None`` when the device is not in the table.

    Raises:
        AmbiguousDeviceError: the name does not say which card (``"H100"``, ``"A100 80GB"``);
            the message names ``argument``.
    """
    found = matching_devices(name)
    if len(found) > 1:
        raise AmbiguousDeviceError(name, found, argument)
    return found[0] if found else None


def table_name(name: str, argument: str = "device") -> str:
    """The table name of exactly one card for ``name``.

    Raises:
        UnknownDeviceError: no card answers to it (the message lists the close ones).
        AmbiguousDeviceError: several do.
    """
    found = match_device(name, argument)
    if found is None:
        raise UnknownDeviceError(name, close_devices(name), argument)
    return found
