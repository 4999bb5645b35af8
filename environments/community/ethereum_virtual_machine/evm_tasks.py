"""The EVM environment's chain settings (the ``token_transfers.yaml`` schema) and transfer tasks.

:func:`load_chain_settings` reads the chain settings file: the node's port, the sending wallet and its ETH
funding, the whitelisted tokens (symbol, contract address, decimals) and the Uniswap V3 settings used to buy
tokens the wallet lacks. :func:`tasks_from_rows` turns task rows into :class:`TransferTask` values; a row
has the fields of the original's generated requests: ``question_type``, ``request`` (the natural-language
request shown to the model), ``destination_address``, ``transfer_token`` (``ETH`` or a whitelisted symbol)
and ``transfer_amount`` (in the token's own units, e.g. ``"0.01"`` ETH or ``"25.5"`` USDC).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any, NamedTuple

import yaml

from atroposlib.envs.data_loading import DatasetError, check_rows

ADDRESS = re.compile(r"0x[0-9a-fA-F]{40}")
TASK_FIELDS = ("question_type", "request", "destination_address", "transfer_token", "transfer_amount")
QUESTION_TYPES = (
    "ETH transfer",
    "ERC-20 transfer using 18 decimal token",
    "ERC-20 transfer using a non-18 decimal token",
)


class Token(NamedTuple):
    """A whitelisted ERC-20 token: ``symbol``, contract ``address`` (lower case) and ``decimals``."""

    symbol: str
    address: str
    decimals: int


@dataclass(frozen=True)
class ChainSettings:
    """The chain settings file's values (addresses lower case, amounts in wei)."""

    port: int
    fork_url: str
    rpc_timeout: float
    wallet: str
    initial_funding: int
    tokens: dict[str, Token]
    router: str
    weth: str
    uniswap_fee: int
    swap_amount: int
    swap_selector: str
    deadline_offset: int


@dataclass(frozen=True)
class TransferTask:
    """One request: send ``amount`` (``base_units`` in wei or the token's smallest unit) of ``token``
    (``ETH`` or a whitelisted symbol) to ``destination`` (lower case)."""

    question_type: str
    request: str
    destination: str
    token: str
    amount: str
    base_units: int

    @property
    def is_eth(self) -> bool:
        return self.token == "ETH"


def _get(data: Any, path: str, source: str) -> Any:
    value = data
    for key in path.split("."):
        if not isinstance(value, dict) or value.get(key) is None:
            raise DatasetError(f"{source}: missing key {path!r}")
        value = value[key]
    return value


def _address(value: Any, where: str) -> str:
    if not isinstance(value, str) or not ADDRESS.fullmatch(value):
        raise DatasetError(f"{where}: not a 0x-prefixed 20-byte hex address: {value!r}")
    return value.lower()


def _whole(value: Any, where: str) -> int:
    try:
        number = int(str(value), 0)
    except ValueError:
        raise DatasetError(f"{where}: not a whole number: {value!r}") from None
    if number < 0:
        raise DatasetError(f"{where}: negative: {value!r}")
    return number


def load_chain_settings(path: str | Path) -> ChainSettings:
    """The settings of the chain settings file ``path``; :class:`DatasetError` naming the file and the key
    when it is missing, unreadable or holds an invalid value."""
    source = str(path)
    try:
        data = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise DatasetError(f"{source}: no such file") from None
    except yaml.YAMLError as exc:
        raise DatasetError(f"{source}: not valid YAML ({str(exc).splitlines()[0]})") from None
    tokens = {}
    for symbol, entry in (_get(data, "whitelisted_tokens", source) or {}).items():
        where = f"{source}: whitelisted_tokens.{symbol}"
        decimals = _whole(_get(entry, "decimals", where), f"{where}.decimals")
        tokens[str(symbol).upper()] = Token(
            str(symbol).upper(), _address(_get(entry, "address", where), f"{where}.address"), decimals
        )
    timeouts = data.get("timeouts") or {}
    return ChainSettings(
        port=_whole(_get(data, "network.port", source), f"{source}: network.port"),
        fork_url=str((data.get("network") or {}).get("fork_url") or ""),
        rpc_timeout=float(timeouts.get("rpc", 30)),
        wallet=_address(_get(data, "funding.custom_wallet", source), f"{source}: funding.custom_wallet"),
        initial_funding=_whole(
            _get(data, "funding.initial_funding_amount", source), f"{source}: funding.initial_funding_amount"
        ),
        tokens=tokens,
        router=_address(_get(data, "defi.uniswap_v3_router", source), f"{source}: defi.uniswap_v3_router"),
        weth=_address(_get(data, "defi.weth_address", source), f"{source}: defi.weth_address"),
        uniswap_fee=_whole(
            _get(data, "defi.default_uniswap_fee", source), f"{source}: defi.default_uniswap_fee"
        ),
        swap_amount=_whole(
            _get(data, "swaps.initial_swap_amount", source), f"{source}: swaps.initial_swap_amount"
        ),
        swap_selector=str(_get(data, "swaps.uniswap_exact_input_single_selector", source)).lower(),
        deadline_offset=_whole(timeouts.get("transaction_deadline_offset", 3600), f"{source}: timeouts"),
    )


def base_units(amount: Any, decimals: int) -> int | None:
    """``amount`` (a positive decimal in whole tokens) in the token's smallest unit, or None when it is not a
    positive number or has more fractional digits than ``decimals``."""
    try:
        value = Decimal(str(amount).strip()) * (Decimal(10) ** decimals)
    except InvalidOperation:
        return None
    if not value.is_finite() or value <= 0 or value != value.to_integral_value():
        return None
    return int(value)


def _task(row: dict[str, Any], where: str, tokens: dict[str, Token]) -> TransferTask:
    question_type = str(row["question_type"])
    if question_type not in QUESTION_TYPES:
        raise DatasetError(f"{where}: field 'question_type' is not one of {list(QUESTION_TYPES)}")
    token = str(row["transfer_token"]).strip().upper()
    if token != "ETH" and token not in tokens:
        raise DatasetError(
            f"{where}: field 'transfer_token' {row['transfer_token']!r} is neither ETH nor a whitelisted token "
            f"({', '.join(sorted(tokens))})"
        )
    decimals = 18 if token == "ETH" else tokens[token].decimals
    units = base_units(row["transfer_amount"], decimals)
    if units is None:
        raise DatasetError(f"{where}: field 'transfer_amount' is not a positive amount of {token}")
    destination = row["destination_address"]
    if not isinstance(destination, str) or not ADDRESS.fullmatch(destination):
        raise DatasetError(f"{where}: field 'destination_address' is not a 0x-prefixed 20-byte hex address")
    if not str(row["request"]).strip():
        raise DatasetError(f"{where}: field 'request' is empty")
    return TransferTask(
        question_type, str(row["request"]), destination.lower(), token, str(row["transfer_amount"]), units
    )


def tasks_from_rows(
    rows: Sequence[dict[str, Any]], source: str, tokens: dict[str, Token]
) -> list[TransferTask]:
    """The tasks of ``rows``; :class:`DatasetError` naming ``source``, the row and the field when a field is
    missing or invalid (an unknown question type or token, an amount the token cannot represent, a
    destination that is not a hex address)."""
    check_rows(rows, TASK_FIELDS, source)
    return [_task(row, f"{source}: row {index}", tokens) for index, row in enumerate(rows)]
