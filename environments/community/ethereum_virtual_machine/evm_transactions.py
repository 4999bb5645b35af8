"""Reading the transaction of a reply and scoring its outcome on the chain.

A reply may reason in ``<think>...</think>``; the transaction is the one JSON object with a ``"to"`` key
after it, e.g. ``{"to": "0x...", "value": "10000000000000000", "data": "0x"}`` (a fenced ```json block is
fine). ``to`` is a hex address in any letter case; ``value`` is in wei, as a JSON integer, a decimal string or
a ``0x`` hex string (``"0x"``, ``""`` and a missing value are zero); ``data`` is ``0x``-prefixed hex (missing
or ``""`` is empty). Other keys are not read: the node sends from the task's wallet. No such object, a
malformed one, several different ones (a hedge) or one only inside the reasoning: no transaction.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Optional

from atroposlib.utils.replies import answer_section

try:
    from environments.community.ethereum_virtual_machine.evm_tasks import ADDRESS, TransferTask
except ModuleNotFoundError:  # run as a script: this folder is on the path
    from evm_tasks import ADDRESS, TransferTask

#: ``transfer(address,uint256)``
TRANSFER_SELECTOR = "0xa9059cbb"
_TO_KEY = re.compile(r'"to"\s*:')
_HEX = re.compile(r"0x(?:[0-9a-fA-F]{2})*")

#: The reward's parts: the transaction ran, the balances moved exactly as asked, it was sent to the right
#: account (the destination for ETH, the token's contract for a token) and its data has the right form.
SUCCESS_WEIGHT, BALANCE_WEIGHT, TARGET_WEIGHT, DATA_WEIGHT = 0.3, 0.5, 0.1, 0.1
NO_TRANSACTION = -1.0


@dataclass(frozen=True)
class Transaction:
    """A transaction to send: ``to`` (lower case), ``value`` in wei, ``data`` (lower-case hex, ``0x`` for
    none)."""

    to: str
    value: int
    data: str


@dataclass(frozen=True)
class Outcome:
    """What a transaction did: whether it ran (``succeeded``), the destination's balance change and the
    sender's, in the task's token (wei for ETH)."""

    succeeded: bool
    destination_change: int
    sender_change: int


def parse_value(value: Any) -> Optional[int]:
    """Wei of a ``value`` field: a non-negative JSON integer (or integral float), decimal or ``0x`` hex
    string; ``"0x"``, ``""`` and None are 0; None for anything else (e.g. ``"0.01"``, ether units)."""
    if value is None or value in ("", "0x", "0X"):
        return 0
    if isinstance(value, bool):
        return None
    if isinstance(value, float):
        return int(value) if value.is_integer() and value >= 0 else None
    if isinstance(value, int):
        return value if value >= 0 else None
    if not isinstance(value, str):
        return None
    text = value.strip()
    if re.fullmatch(r"\d+", text):
        return int(text)
    if re.fullmatch(r"0[xX][0-9a-fA-F]+", text):
        return int(text, 16)
    return None


def _objects(text: str) -> list[Any]:
    decoder = json.JSONDecoder()
    found, pos = [], 0
    while (start := text.find("{", pos)) != -1:
        try:
            obj, end = decoder.raw_decode(text, start)
        except json.JSONDecodeError:
            pos = start + 1
            continue
        found.append(obj)
        pos = end
    return found


def to_transaction(obj: dict[str, Any]) -> Optional[Transaction]:
    """The transaction of a parsed JSON object, or None when ``to``, ``value`` or ``data`` is invalid."""
    to, value = obj.get("to"), parse_value(obj.get("value"))
    data = obj.get("data")
    data = "0x" if data in (None, "") else data
    if not isinstance(to, str) or not ADDRESS.fullmatch(to.strip()) or value is None:
        return None
    if not isinstance(data, str) or not _HEX.fullmatch(data.strip()):
        return None
    return Transaction(to.strip().lower(), value, data.strip().lower())


def reply_transaction(reply: str) -> Optional[Transaction]:
    """The one transaction of ``reply`` (see the module docstring), or None."""
    section = answer_section(reply)
    if section is None:
        return None
    objects = [obj for obj in _objects(section) if isinstance(obj, dict) and "to" in obj]
    # a "to" key outside the parsed objects belongs to a malformed one: a broken second transaction
    if not objects or len(_TO_KEY.findall(section)) != len(objects):
        return None
    transactions = {to_transaction(obj) for obj in objects}
    if len(transactions) != 1:
        return None
    return transactions.pop()


def transfer_data(recipient: str, amount: int) -> str:
    """The call data of ``transfer(recipient, amount)``."""
    return TRANSFER_SELECTOR + recipient.lower().removeprefix("0x").rjust(64, "0") + f"{amount:064x}"


def transaction_score(
    task: TransferTask, token_address: Optional[str], tx: Transaction, outcome: Outcome
) -> float:
    """The reward of a transaction sent for ``task`` (``token_address``: the token's contract, None for
    ETH): the weighted parts above, 1.0 for the exact transfer asked for."""
    if task.is_eth:
        moved = outcome.destination_change == task.base_units
        target, data_ok = task.destination, tx.data == "0x"
    else:
        moved = outcome.destination_change == task.base_units and outcome.sender_change == -task.base_units
        target = token_address or ""
        data_ok = tx.data.startswith(TRANSFER_SELECTOR) and len(tx.data) == len(transfer_data(target, 0))
    return (
        SUCCESS_WEIGHT * outcome.succeeded
        + BALANCE_WEIGHT * moved
        + TARGET_WEIGHT * (tx.to == target)
        + DATA_WEIGHT * data_ok
    )
