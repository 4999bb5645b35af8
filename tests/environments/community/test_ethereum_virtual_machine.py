"""The EVM environment against a stand-in Anvil node: reading transactions, the balance-based reward, wallet
funding, snapshots, the task files and the question-type choice, ``process`` and ``evaluate``."""

from __future__ import annotations

import json
from typing import Any

import pytest

from atroposlib.envs.data_loading import DatasetError
from environments.community.ethereum_virtual_machine.evm_chain import ChainError
from environments.community.ethereum_virtual_machine.evm_server import HERE, TASKS, EVMEnv
from environments.community.ethereum_virtual_machine.evm_tasks import (
    QUESTION_TYPES,
    load_chain_settings,
    tasks_from_rows,
)
from environments.community.ethereum_virtual_machine.evm_transactions import reply_transaction, transfer_data
from tests.environments.community.community_runs import always, bad_rows_error, evaluate_local, process_local
from tests.environments.community.evm_ledger import Ledger, serve_ledger, start_ledger
from tests.helpers.cli_runs import FIXTURES, read_jsonl
from tests.helpers.single_turn_runs import check_groups, offline_env, prompt_text, setup_failure

SAMPLE = FIXTURES / "community" / "ethereum_virtual_machine" / "tasks_sample.jsonl"
SETTINGS = load_chain_settings(HERE / "configs" / "token_transfers.yaml")
TASK_ROWS = {row["request"]: row for row in read_jsonl(SAMPLE)}
ETH_TASK, DAI_TASK, USDC_TASK = (read_jsonl(SAMPLE)[i] for i in (0, 2, 4))


def new_ledger() -> Ledger:
    return Ledger({t.address: t.decimals for t in SETTINGS.tokens.values()}, SETTINGS.router)


def tx_json(to: str, value: Any = "0", data: str = "0x") -> str:
    return json.dumps({"to": to, "value": value, "data": data})


def right_transaction(row: dict[str, Any], *, wrong_amount: bool = False) -> str:
    """The JSON transaction a task asks for (or one sending one base unit too much)."""
    tasks = tasks_from_rows([row], "row", SETTINGS.tokens)
    task = tasks[0]
    units = task.base_units + (1 if wrong_amount else 0)
    if task.is_eth:
        return tx_json(task.destination, str(units))
    return tx_json(SETTINGS.tokens[task.token].address, "0", transfer_data(task.destination, units))


@pytest.fixture
def ledger():
    return new_ledger()


@pytest.fixture
async def env(ledger, tiny_model_dir):
    with serve_ledger(ledger) as url:
        environment = offline_env(EVMEnv, tiny_model_dir, dataset_path=str(SAMPLE), rpc_url=url)
        await environment.setup()
        yield environment
        await environment.node.aclose()


def _task(env: EVMEnv, row: dict[str, Any]):
    return next(t for t in env.train + env.test if t.request == row["request"])


async def test_a_correct_transfer_in_any_equivalent_form_scores_one(env):
    eth = _task(env, ETH_TASK)
    checksummed = "0x5aAeb6053F3E94C9b9A09f33669435E7Ef1BeAed"
    wei = 25 * 10**16
    for reply in (
        tx_json(checksummed, str(wei)),
        tx_json(checksummed.lower(), hex(wei)),
        tx_json(checksummed.upper().replace("0X", "0x"), wei, ""),  # JSON integer, empty data
        "<think>0.25 ETH is 25 * 10^16 wei</think>```json\n"
        + json.dumps({"to": checksummed, "value": wei})
        + "\n```",
        tx_json(checksummed, str(wei)) + " (again: " + tx_json(checksummed, hex(wei)) + ")",  # the same twice
    ):
        assert await env.score_transaction(reply, eth) == pytest.approx(1.0), reply
    usdc = _task(env, USDC_TASK)
    assert await env.score_transaction(right_transaction(USDC_TASK), usdc) == pytest.approx(1.0)
    dai = _task(env, DAI_TASK)
    assert await env.score_transaction(right_transaction(DAI_TASK), dai) == pytest.approx(1.0)


async def test_wrong_hedged_malformed_and_hidden_transactions_score_below_one(env):
    eth, usdc = _task(env, ETH_TASK), _task(env, USDC_TASK)
    right = right_transaction(ETH_TASK)
    other = "0x" + "12" * 20
    cases = {
        tx_json(other, str(25 * 10**16)): 0.4,  # wrong recipient: ran, right data form
        right_transaction(ETH_TASK, wrong_amount=True): 0.5,  # wrong amount
        tx_json(eth.destination, "0.25"): -1.0,  # ether units, not wei
        right + "\nor maybe\n" + tx_json(eth.destination, str(10**18)): -1.0,  # a hedge
        right + ' {"to": "0x12", "value": }': -1.0,  # a second, broken transaction
        '{"to": "0x5aAeb6053F3E94C9b9A09f33669435E7Ef1BeAed", "value": "250000000000000000"': -1.0,  # unclosed
        "<think>" + right + "</think> done": -1.0,  # only in the reasoning
        "<think>unclosed " + right: -1.0,
        "send 0.25 ETH to 0x5aAeb6053F3E94C9b9A09f33669435E7Ef1BeAed": -1.0,  # prose only
        "": -1.0,
    }
    for reply, expected in cases.items():
        assert await env.score_transaction(reply, eth) == pytest.approx(expected), reply
    token = SETTINGS.tokens["USDC"].address
    assert await env.score_transaction(
        right_transaction(USDC_TASK, wrong_amount=True), usdc
    ) == pytest.approx(0.5)
    # ETH sent to the token's contract reverts; the amount in ETH units to the destination moves no USDC
    assert await env.score_transaction(
        tx_json(token, "1", transfer_data(usdc.destination, 10**8)), usdc
    ) == pytest.approx(0.2)
    assert await env.score_transaction(tx_json(usdc.destination, str(100 * 10**6)), usdc) == pytest.approx(
        0.3
    )
    # more USDC than the wallet holds: mined, reverted
    assert await env.score_transaction(
        tx_json(token, "0", transfer_data(usdc.destination, 10**30)), usdc
    ) == pytest.approx(0.2)


async def test_every_execution_is_reverted_and_the_wallet_is_funded(env, ledger):
    wallet = SETTINGS.wallet
    bought = {"DAI", "LINK", "USDC", "WBTC"}  # the tokens the sample's tasks send, bought for 10 ETH each
    assert ledger.eth[wallet] == SETTINGS.initial_funding - 4 * (SETTINGS.swap_amount + 21_000 * 10**9)
    for token in SETTINGS.tokens.values():
        held = ledger.tokens[token.address].get(wallet, 0)
        assert held == (10 * 1000 * 10**token.decimals if token.symbol in bought else 0)
    state = (dict(ledger.eth), json.dumps(ledger.tokens, sort_keys=True))
    await env.score_transaction(right_transaction(USDC_TASK), _task(env, USDC_TASK))
    await env.score_transaction(right_transaction(ETH_TASK), _task(env, ETH_TASK))
    assert (dict(ledger.eth), json.dumps(ledger.tokens, sort_keys=True)) == state and not ledger.snapshots
    assert [tx["from"] for tx in ledger.sent[-2:]] == [wallet, wallet]


async def test_a_node_that_cannot_be_reached_stops_the_setup(tiny_model_dir):
    env = offline_env(EVMEnv, tiny_model_dir, dataset_path=str(SAMPLE), rpc_url="http://127.0.0.1:9")
    with pytest.raises(ChainError, match=r"127\.0\.0\.1:9.*anvil --fork-url https://"):
        await env.setup()


def test_reply_transaction_reads_the_fields():
    tx = reply_transaction('{"to": "0x' + "AB" * 20 + '", "value": "0x10", "gas": 5}')
    assert tx is not None and (tx.to, tx.value, tx.data) == ("0x" + "ab" * 20, 16, "0x")
    assert (
        reply_transaction('{"to": "0x' + "ab" * 20 + '", "value": "1", "data": "0xabc"}') is None
    )  # odd hex
    assert reply_transaction('{"to": "jasper.eth", "value": "1"}') is None


def test_the_shipped_tasks_and_settings():
    tasks = tasks_from_rows(read_jsonl(TASKS), str(TASKS), SETTINGS.tokens)
    assert len(tasks) == 24 and {t.question_type for t in tasks} == set(QUESTION_TYPES)
    for task in tasks:
        decimals = 18 if task.is_eth else SETTINGS.tokens[task.token].decimals
        assert (task.is_eth or decimals == 18) == (task.question_type != QUESTION_TYPES[2])
        assert task.destination in task.request.lower() and task.amount in task.request
    assert SETTINGS.port == 8545 and SETTINGS.tokens["USDC"].decimals == 6


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"transfer_token": "SHIB"}, "row 1: field 'transfer_token' 'SHIB' is neither ETH nor a whitelisted"),
        ({"transfer_amount": "0.0000001"}, "row 1: field 'transfer_amount' is not a positive amount of USDC"),
        ({"transfer_amount": "-3"}, "row 1: field 'transfer_amount'"),
        ({"destination_address": "jasper.eth"}, "row 1: field 'destination_address' is not a 0x-prefixed"),
        ({"question_type": "swap"}, "row 1: field 'question_type' is not one of"),
        ({"request": None}, "row 1: missing field 'request'"),
    ],
)
async def test_bad_task_rows(tiny_model_dir, tmp_path, change, message):
    await bad_rows_error(EVMEnv, tiny_model_dir, tmp_path, [ETH_TASK, {**USDC_TASK, **change}], message)


async def test_bad_settings_and_question_types(tiny_model_dir, tmp_path):
    broken = tmp_path / "chain.yaml"
    broken.write_text(
        (HERE / "configs" / "token_transfers.yaml").read_text().replace("decimals: 6", "decimals: six", 1)
    )
    with pytest.raises(
        DatasetError, match=r"chain.yaml: whitelisted_tokens.USDC.decimals: not a whole number"
    ):
        load_chain_settings(broken)
    env = offline_env(EVMEnv, tiny_model_dir, question_types=["NFT mint"])
    await setup_failure(env, "question_types: unknown")


async def test_question_types_follow_the_weak_ones(env):
    env.rng.seed(0)
    assert {env.pick_question_type() for _ in range(50)} == set(QUESTION_TYPES)  # random before any score
    env.on_group_scored(_task(env, ETH_TASK), [1.0] * 4)
    weak = [t for t in QUESTION_TYPES if t != "ETH transfer"]
    for qtype in weak:
        env.performance[qtype] = [0.2]
    picks = [env.pick_question_type() for _ in range(1000)]
    assert 0.75 < sum(p in weak for p in picks) / len(picks) < 0.85
    for _ in range(12):
        env.on_group_scored(_task(env, ETH_TASK), [0.5])
    assert env.performance["ETH transfer"] == [0.5] * 10
    assert (await env.get_next_item()).question_type in QUESTION_TYPES


def responder(*, spoil_every: int = 2):
    """The right transaction for a task, one base unit too much on every ``spoil_every``-th reply."""

    def respond(prompt, index):
        text = prompt_text(prompt)
        row = next(row for request, row in TASK_ROWS.items() if request in text)
        return "<think>Encoding the transfer.</think>\n" + right_transaction(
            row, wrong_amount=index % spoil_every == 1
        )

    return respond


def readme_responder():
    """The README command's replies and the function that stops the node it starts (the stand-in, on
    Anvil's default port, which the README command names)."""
    server = start_ledger(new_ledger(), 8545)

    def stop() -> None:
        server.shutdown()
        server.server_close()

    return responder(), stop


def test_process_against_the_stand_in_node(scripted, ledger):
    with serve_ledger(ledger) as url:
        groups = process_local(
            scripted, EVMEnv, SAMPLE, responder(), rpc_url=url, group_size=2, total_steps=3
        )
    assert len(groups) == 3
    check_groups(groups, 3, [0.5, 1.0])


def test_evaluate_reports_per_type_accuracy(scripted, ledger):
    with serve_ledger(ledger) as url:
        evaluation = evaluate_local(scripted, EVMEnv, SAMPLE, responder(spoil_every=10**6), rpc_url=url)
        unreadable = evaluate_local(scripted, EVMEnv, SAMPLE, always("Sure, sending it now!"), rpc_url=url)
    metrics = evaluation.metrics
    assert metrics["eval/percent_correct"] == metrics["eval/valid_transaction_rate"] == 1.0
    assert {k for k in metrics if k.startswith("eval/percent_correct/")} == {
        f"eval/percent_correct/{t}" for t in QUESTION_TYPES
    }
    assert unreadable.metrics["eval/valid_transaction_rate"] == 0.0
    assert unreadable.metrics["eval/mean_score"] == -1.0
