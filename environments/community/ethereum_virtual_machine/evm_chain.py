"""The Anvil node the EVM environment sends transactions to, over JSON-RPC.

:class:`AnvilNode` speaks the JSON-RPC methods Anvil serves: ``eth_getBalance``, ``eth_call`` (ERC-20
``balanceOf``), ``eth_sendTransaction`` from an impersonated account (``anvil_impersonateAccount``),
``eth_getTransactionReceipt``, ``evm_snapshot`` / ``evm_revert`` and ``anvil_setBalance``.
:meth:`AnvilNode.execute` runs one transaction between a snapshot and its revert, so every rollout starts
from the same chain; executions are serialized (one lock per node) because a revert undoes everything after
its snapshot. :func:`prepare_wallet` funds the sending wallet once at set-up.

A transaction the node rejects or that reverts is a failed transaction (:class:`Outcome` ``succeeded`` is
False); a node that cannot be reached or answers nonsense raises :class:`ChainError`, so no reply is scored
against a broken chain.
"""

from __future__ import annotations

import asyncio
from typing import Any, Optional

import httpx

try:
    from environments.community.ethereum_virtual_machine.evm_tasks import ChainSettings, Token
    from environments.community.ethereum_virtual_machine.evm_transactions import Outcome, Transaction
except ModuleNotFoundError:  # run as a script: this folder is on the path
    from evm_tasks import ChainSettings, Token
    from evm_transactions import Outcome, Transaction

#: ``balanceOf(address)``
BALANCE_OF_SELECTOR = "0x70a08231"


class ChainError(RuntimeError):
    """The node cannot be reached, or answered something other than what the method returns."""


class RpcError(Exception):
    """The node answered a request with a JSON-RPC error (e.g. a transaction that would revert)."""


def _word(value: int | str) -> str:
    """One 32-byte ABI word (an address or an unsigned integer) as 64 hex digits."""
    if isinstance(value, str):
        return value.lower().removeprefix("0x").rjust(64, "0")
    return f"{value:064x}"


class AnvilNode:
    """A JSON-RPC client of the node at ``url`` (``timeout`` seconds per request)."""

    def __init__(self, url: str, timeout: float = 30.0) -> None:
        self.url = url
        self._client = httpx.AsyncClient(timeout=timeout)
        self._lock = asyncio.Lock()
        self._ids = 0

    async def request(self, method: str, params: list[Any]) -> Any:
        """The result of ``method(params)``; :class:`RpcError` for a JSON-RPC error, :class:`ChainError` when
        the node cannot be reached or the answer is not JSON-RPC."""
        self._ids += 1
        payload = {"jsonrpc": "2.0", "id": self._ids, "method": method, "params": params}
        try:
            response = await self._client.post(self.url, json=payload)
            response.raise_for_status()
            answer = response.json()
        except (httpx.HTTPError, ValueError) as exc:
            raise ChainError(f"{self.url}: {method} failed ({type(exc).__name__}: {exc})") from None
        if not isinstance(answer, dict) or ("result" not in answer and "error" not in answer):
            raise ChainError(f"{self.url}: {method}: not a JSON-RPC answer: {str(answer)[:200]}")
        if answer.get("error") is not None:
            error = answer["error"]
            raise RpcError(error.get("message", str(error)) if isinstance(error, dict) else str(error))
        return answer["result"]

    async def _quantity(self, method: str, params: list[Any]) -> int:
        result = await self.request(method, params)
        try:
            return int(result, 16) if result not in ("0x", "") else 0
        except (TypeError, ValueError):
            raise ChainError(f"{self.url}: {method}: not a hex quantity: {result!r}") from None

    async def balance(self, holder: str, token: Optional[str] = None) -> int:
        """``holder``'s balance: wei without ``token``, else the token contract's ``balanceOf(holder)``."""
        if token is None:
            return await self._quantity("eth_getBalance", [holder, "latest"])
        call = {"to": token, "data": BALANCE_OF_SELECTOR + _word(holder)}
        return await self._quantity("eth_call", [call, "latest"])

    async def send(self, sender: str, tx: Transaction) -> bool:
        """Send ``tx`` from ``sender`` (impersonated) and mine it; True when its receipt says it succeeded."""
        fields = {"from": sender, "to": tx.to, "value": hex(tx.value), "data": tx.data}
        try:
            tx_hash = await self.request("eth_sendTransaction", [fields])
        except RpcError:
            return False  # rejected or reverted while the node estimated its gas
        receipt = await self.request("eth_getTransactionReceipt", [tx_hash])
        if receipt is None:  # the node does not mine on its own
            await self.request("evm_mine", [])
            receipt = await self.request("eth_getTransactionReceipt", [tx_hash])
        if not isinstance(receipt, dict):
            raise ChainError(f"{self.url}: no receipt for transaction {tx_hash}")
        return receipt.get("status") == "0x1"

    async def execute(self, sender: str, tx: Transaction, destination: str, token: Optional[str]) -> Outcome:
        """Run ``tx`` from ``sender`` on a snapshot and revert it: whether it succeeded and how the
        ``destination``'s and the sender's balances of ``token`` (ETH when None) changed."""
        async with self._lock:
            snapshot = await self.request("evm_snapshot", [])
            try:
                before = (await self.balance(destination, token), await self.balance(sender, token))
                succeeded = await self.send(sender, tx)
                after = (await self.balance(destination, token), await self.balance(sender, token))
            finally:
                if await self.request("evm_revert", [snapshot]) is not True:
                    raise ChainError(f"{self.url}: evm_revert of snapshot {snapshot} failed")
        return Outcome(succeeded, after[0] - before[0], after[1] - before[1])

    async def aclose(self) -> None:
        await self._client.aclose()


def swap_transaction(settings: ChainSettings, token: Token, deadline: int) -> Transaction:
    """Uniswap V3 ``exactInputSingle`` buying ``token`` with ``swap_amount`` wei of ETH for the wallet."""
    words = [
        settings.weth,
        token.address,
        settings.uniswap_fee,
        settings.wallet,
        deadline,
        settings.swap_amount,
        0,
        0,
    ]
    data = settings.swap_selector + "".join(_word(w) for w in words)
    return Transaction(settings.router, settings.swap_amount, data)


async def prepare_wallet(node: AnvilNode, settings: ChainSettings, needs: dict[str, int]) -> None:
    """Impersonate the wallet, top its ETH up to ``initial_funding`` and buy each token of ``needs``
    (symbol: the largest amount a task sends) it holds less of; :class:`ChainError` when it still cannot
    cover a task."""
    wallet = settings.wallet
    await node.request("anvil_impersonateAccount", [wallet])
    if await node.balance(wallet) < settings.initial_funding:
        await node.request("anvil_setBalance", [wallet, hex(settings.initial_funding)])
    for symbol, need in sorted(needs.items()):
        token = settings.tokens[symbol]
        if await node.balance(wallet, token.address) >= need:
            continue
        block = await node.request("eth_getBlockByNumber", ["latest", False])
        deadline = int(block["timestamp"], 16) + settings.deadline_offset
        await node.send(wallet, swap_transaction(settings, token, deadline))
        held = await node.balance(wallet, token.address)
        if held < need:
            raise ChainError(
                f"{node.url}: the wallet {wallet} holds {held} base units of {symbol} after buying it on Uniswap; "
                f"the tasks send up to {need}"
            )
