"""A stand-in for an Anvil node in the EVM environment's tests: a small ledger served over JSON-RPC on loopback.

:class:`Ledger` keeps ETH balances, the balances of a few ERC-20 tokens (``transfer`` and ``balanceOf``),
snapshots (``evm_snapshot`` / ``evm_revert``), impersonated senders and receipts, and a Uniswap-like router
that pays ``SWAP_RATE`` whole tokens per ETH for an ``exactInputSingle`` call. Sending costs the sender a
fixed gas fee, as on a real chain. :func:`serve_ledger` serves one on a thread and yields its URL.
"""

from __future__ import annotations

import copy
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

GAS_FEE = 21_000 * 10**9
SWAP_RATE = 1000
TRANSFER, BALANCE_OF, SWAP = "0xa9059cbb", "0x70a08231", "0x414bf389"


class RpcFailure(Exception):
    """Answered as a JSON-RPC error."""


class Ledger:
    """The chain state: ``eth`` (address: wei), ``tokens`` (token: {address: units}), ``decimals``."""

    def __init__(self, decimals: dict[str, int], router: str) -> None:
        self.decimals = {t.lower(): d for t, d in decimals.items()}
        self.router = router.lower()
        self.eth: dict[str, int] = {}
        self.tokens: dict[str, dict[str, int]] = {t: {} for t in self.decimals}
        self.snapshots: list[tuple[dict, dict]] = []
        self.impersonated: set[str] = set()
        self.receipts: dict[str, dict[str, Any]] = {}
        self.sent: list[dict[str, Any]] = []
        self.lock = threading.Lock()

    def handle(self, method: str, params: list[Any]) -> Any:
        with self.lock:
            handler = getattr(self, "rpc_" + method, None)
            if handler is None:
                raise RpcFailure(f"method {method} not found")
            return handler(*params)

    def rpc_anvil_impersonateAccount(self, address: str) -> None:
        self.impersonated.add(address.lower())

    def rpc_anvil_setBalance(self, address: str, value: str) -> None:
        self.eth[address.lower()] = int(value, 16)

    def rpc_eth_getBalance(self, address: str, block: str) -> str:
        return hex(self.eth.get(address.lower(), 0))

    def rpc_eth_getBlockByNumber(self, block: str, full: bool) -> dict[str, str]:
        return {"number": hex(len(self.receipts)), "timestamp": hex(1_700_000_000 + len(self.receipts))}

    def rpc_eth_call(self, call: dict[str, str], block: str) -> str:
        token, data = call["to"].lower(), call["data"].lower()
        if token not in self.tokens or not data.startswith(BALANCE_OF):
            raise RpcFailure("execution reverted")
        return hex(self.tokens[token].get("0x" + data[-40:], 0))

    def rpc_evm_snapshot(self) -> str:
        self.snapshots.append((copy.deepcopy(self.eth), copy.deepcopy(self.tokens)))
        return hex(len(self.snapshots))

    def rpc_evm_revert(self, snapshot: str) -> bool:
        index = int(snapshot, 16) - 1
        if not 0 <= index < len(self.snapshots):
            return False
        self.eth, self.tokens = self.snapshots[index]
        del self.snapshots[index:]
        return True

    def rpc_eth_getTransactionReceipt(self, tx_hash: str) -> Any:
        return self.receipts.get(tx_hash)

    def rpc_eth_sendTransaction(self, tx: dict[str, str]) -> str:
        sender, to = tx["from"].lower(), tx["to"].lower()
        value, data = int(tx.get("value", "0x0"), 16), tx.get("data", "0x").lower()
        if sender not in self.impersonated:
            raise RpcFailure("No Signer available")
        if self.eth.get(sender, 0) < value + GAS_FEE:
            raise RpcFailure("insufficient funds for gas * price + value")
        self.sent.append(dict(tx))
        status = self._apply(sender, to, value, data)
        self.eth[sender] -= GAS_FEE
        tx_hash = "0x" + f"{len(self.receipts) + 1:064x}"
        self.receipts[tx_hash] = {"transactionHash": tx_hash, "status": "0x1" if status else "0x0"}
        return tx_hash

    def _apply(self, sender: str, to: str, value: int, data: str) -> bool:
        if to in self.tokens:
            if value or not data.startswith(TRANSFER) or len(data) != 2 + 8 + 128:
                raise RpcFailure("execution reverted")
            recipient, amount = "0x" + data[10:74][-40:], int(data[74:], 16)
            balances = self.tokens[to]
            if balances.get(sender, 0) < amount:
                return False  # mined, reverted
            balances[sender] -= amount
            balances[recipient] = balances.get(recipient, 0) + amount
            return True
        if to == self.router:
            if not data.startswith(SWAP):
                raise RpcFailure("execution reverted")
            words = [data[10 + 64 * i : 74 + 64 * i] for i in range(8)]
            token, recipient = "0x" + words[1][-40:], "0x" + words[3][-40:]
            bought = value * SWAP_RATE * 10 ** self.decimals[token] // 10**18
            self.eth[sender] -= value
            self.tokens[token][recipient] = self.tokens[token].get(recipient, 0) + bought
            return True
        self.eth[sender] -= value
        self.eth[to] = self.eth.get(to, 0) + value
        return True


def _handler(ledger: Ledger) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 (http.server's name)
            request = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            answer: dict[str, Any] = {"jsonrpc": "2.0", "id": request.get("id")}
            try:
                answer["result"] = ledger.handle(request["method"], request.get("params", []))
            except RpcFailure as exc:
                answer["error"] = {"code": -32000, "message": str(exc)}
            body = json.dumps(answer).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    return Handler


@contextmanager
def serve_ledger(ledger: Ledger, port: int = 0) -> Iterator[str]:
    """Serve ``ledger`` on 127.0.0.1:``port`` (0: any free port) on a thread; yields its URL."""
    server = ThreadingHTTPServer(("127.0.0.1", port), _handler(ledger))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def start_ledger(ledger: Ledger, port: int) -> ThreadingHTTPServer:
    """Serve ``ledger`` on 127.0.0.1:``port`` on a daemon thread until ``shutdown()`` (for a command run in a
    subprocess that names the port)."""
    server = ThreadingHTTPServer(("127.0.0.1", port), _handler(ledger))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server
