"""EVM transactions: turn a natural-language transfer request into one Ethereum transaction.

Each task asks to send ETH or a whitelisted ERC-20 token (``question_types``: an ETH transfer, a transfer of
an 18-decimal token, a transfer of a token with other decimals) to an address. The reply may reason in
``<think>...</think>``; after it comes one JSON transaction ``{"to": ..., "value": ..., "data": ...}``
(``evm_transactions.py`` says which forms are read). It is sent from the wallet of the chain settings
(``anvil_config_path``, the original's ``configs/token_transfers.yaml`` schema) to the user's Anvil node
(``rpc_url``, default ``http://127.0.0.1:<network.port>``; start one with
``anvil --fork-url <mainnet RPC URL>``), between a snapshot and its revert, and scored by the balances:

reward = 0.3 if it succeeded + 0.5 if the destination received exactly the amount asked (and for a token,
the wallet lost exactly it) + 0.1 if it went to the right account (the destination for ETH, the token's
contract for a token) + 0.1 if its data has the right form (none for ETH, a ``transfer`` call for a token):
1.0 (correct) for the transfer asked for in any equivalent form. -1.0 for no transaction, a malformed one,
several different ones or one only in the reasoning. The original's thinking-length bonus is not kept (the
reasoning never counts). Training picks the question type as the original: 80 % from the types averaging
under 0.9 over their last 10 groups.

Data: the original generated its tasks with a paid model API; ``evm_tasks.jsonl`` holds tasks written for
this port in that schema (``evm_tasks.py``), split 80/20 by a seeded shuffle. ``--env.dataset_path`` /
``--env.eval_dataset_path`` read local tasks in the same schema. Set-up funds the wallet (impersonated; ETH
topped up with ``anvil_setBalance``, missing tokens bought on Uniswap V3) and stops with one line when the
node cannot be reached or the wallet cannot cover the tasks.

``python environments/community/ethereum_virtual_machine/evm_server.py {serve,process,evaluate} ...``
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Optional

from pydantic import Field

from atroposlib.envs.data_loading import DatasetError, read_local_rows, seeded_split
from atroposlib.envs.declared_defaults import DeclaredDefaults
from atroposlib.envs.env_config import ORIGINAL_DUMP_AND_LOG_KEYS
from atroposlib.envs.reporting import mean
from atroposlib.envs.single_turn import SingleTurnEnv, SingleTurnEnvConfig

try:
    from environments.community.ethereum_virtual_machine.evm_chain import (
        AnvilNode,
        ChainError,
        prepare_wallet,
    )
    from environments.community.ethereum_virtual_machine.evm_tasks import (
        QUESTION_TYPES,
        ChainSettings,
        TransferTask,
        load_chain_settings,
        tasks_from_rows,
    )
    from environments.community.ethereum_virtual_machine.evm_transactions import (
        NO_TRANSACTION,
        reply_transaction,
        transaction_score,
    )
except ModuleNotFoundError:  # run as a script: this folder is on the path
    from evm_chain import AnvilNode, ChainError, prepare_wallet
    from evm_tasks import QUESTION_TYPES, ChainSettings, TransferTask, load_chain_settings, tasks_from_rows
    from evm_transactions import NO_TRANSACTION, reply_transaction, transaction_score

HERE = Path(__file__).resolve().parent
TASKS = HERE / "evm_tasks.jsonl"
#: the original's adaptive selection: this share of picks from the weak types, weak under this mean score
WEAK_SHARE, WEAK_THRESHOLD, RECENT_GROUPS = 0.8, 0.9, 10

SYSTEM_PROMPT = (
    "You are a deep thinking AI, you may use extremely long chains of thought to deeply consider the problem "
    "and deliberate with yourself via systematic reasoning processes to help come to a correct solution prior "
    "to answering. You should enclose your thoughts and internal monologue inside <think> </think> tags, and "
    "then provide your solution or response to the problem.\n\n"
    "You are allowed to use a maximum of {budget} tokens. Please strive to use less.\n\n"
    "You are here to assist a user execute transfers of both ETH and ERC-20 tokens as requested. Your job is "
    "to generate correct Ethereum transaction data for the requested action. The transaction is sent from "
    "the user's wallet {wallet}.\n\n"
    "IMPORTANT: After your thinking, your response must include exactly one valid JSON transaction object:\n"
    '{{"to": "0x...", "value": "amount_in_wei", "data": "0x..."}}\n\n'
    "- 'to': The recipient address (contract or EOA)\n"
    "- 'value': Amount of ETH to send in wei (string)\n"
    "- 'data': Transaction data (0x for none)\n\n"
    "If you do not provide a valid JSON transaction object, your submission will be ignored and you will "
    "receive a score of -1.0.\n\n"
    "Tokens (symbol: contract address, decimals):\n{tokens}"
)


class EVMEnvConfig(SingleTurnEnvConfig):
    """SingleTurnEnvConfig plus the original's chain settings file and question types, the node's URL and the
    task files."""

    ignored_original_keys = {
        "debug_logging": ORIGINAL_DUMP_AND_LOG_KEYS["debug_logging"],
        "suppress_base_env_logs": ORIGINAL_DUMP_AND_LOG_KEYS["suppress_base_env_logs"],
        "max_steps": "an episode is one transaction (the original's value, 1, was never read)",
    }

    anvil_config_path: str = Field(
        "configs/token_transfers.yaml",
        description="chain settings YAML (network port, wallet, whitelisted tokens, Uniswap settings); a "
        "relative path not found from the working directory is read from this environment's folder",
    )
    question_types: list[str] = Field(
        list(QUESTION_TYPES), description="types of transfer requests to train on"
    )
    rpc_url: Optional[str] = Field(
        None, description="JSON-RPC URL of the Anvil node (default: http://127.0.0.1:<network.port>)"
    )
    dataset_path: Optional[str] = Field(
        None, description="local tasks (default: the shipped evm_tasks.jsonl)"
    )
    eval_dataset_path: Optional[str] = Field(
        None, description="local evaluation tasks (default: 20% held out)"
    )
    split_seed: int = Field(42, description="seed of the 80/20 split and of the question-type choice")


def _settings_path(path: str) -> Path:
    candidate = Path(path)
    return candidate if candidate.is_absolute() or candidate.exists() else HERE / candidate


class EVMEnv(DeclaredDefaults, SingleTurnEnv):
    """Rewards transactions by the balances they move on an Anvil node (see the module docstring)."""

    name = "evm_agent"
    env_config_cls = EVMEnvConfig
    config: EVMEnvConfig
    default_model = "NousResearch/Hermes-3-Llama-3.1-8B"
    #: the original's config_init values (its max_token_length, 2048, is the default)
    default_env_values = dict(
        group_size=4, total_steps=500, batch_size=16, steps_per_eval=50, wandb_name="evm-agent"
    )

    def __init__(self, config: EVMEnvConfig, server_configs, slurm=False, testing=False):
        super().__init__(config, server_configs, slurm, testing)
        self.settings: Optional[ChainSettings] = None
        self.node: Optional[AnvilNode] = None
        self.train_by_type: dict[str, list[TransferTask]] = {}
        self.performance: dict[str, list[float]] = {}
        self.rng = random.Random(config.split_seed)
        self.success_buffer: list[float] = []

    # -- data and chain ---------------------------------------------------------------------------------
    def _tasks(self, path: Optional[str]) -> list[TransferTask]:
        assert self.settings is not None
        source = path or TASKS
        return tasks_from_rows(read_local_rows(source), str(source), self.settings.tokens)

    async def setup(self) -> None:
        cfg = self.config
        unknown = sorted(set(cfg.question_types) - set(QUESTION_TYPES))
        if unknown:
            raise DatasetError(f"question_types: unknown {unknown} (known: {list(QUESTION_TYPES)})")
        self.settings = load_chain_settings(_settings_path(cfg.anvil_config_path))
        tasks = [t for t in self._tasks(cfg.dataset_path) if t.question_type in cfg.question_types]
        if not tasks:
            raise DatasetError(
                f"{cfg.dataset_path or TASKS}: no tasks of question types {cfg.question_types}"
            )
        if cfg.eval_dataset_path:
            self.train, self.test = tasks, self._tasks(cfg.eval_dataset_path)
        else:
            self.train, self.test = seeded_split(tasks, cfg.split_seed)
        for task in self.train:
            self.train_by_type.setdefault(task.question_type, []).append(task)
        self.performance = {qtype: [] for qtype in self.train_by_type}
        await self._connect([*self.train, *self.test])

    async def _connect(self, tasks: Sequence[TransferTask]) -> None:
        assert self.settings is not None
        url = self.config.rpc_url or f"http://127.0.0.1:{self.settings.port}"
        self.node = AnvilNode(url, self.settings.rpc_timeout)
        needs: dict[str, int] = {}
        for task in tasks:
            if not task.is_eth:
                needs[task.token] = max(needs.get(task.token, 0), task.base_units)
        try:
            await prepare_wallet(self.node, self.settings, needs)
        except ChainError as exc:
            raise ChainError(
                f"{exc}; start an Anvil node forking mainnet (anvil --fork-url "
                f"{self.settings.fork_url or '<mainnet RPC URL>'} --port {self.settings.port}) or pass --env.rpc_url"
            ) from None

    # -- training items ---------------------------------------------------------------------------------
    def pick_question_type(self) -> str:
        """The original's choice: a random type until groups were scored, then 80 % of the picks from the
        types whose recent mean score is under 0.9 (untried types count as 0) and the rest from the others."""
        types = sorted(self.train_by_type)
        if not any(self.performance.values()):
            return self.rng.choice(types)
        means = {t: mean(self.performance[t]) if self.performance[t] else 0.0 for t in types}
        weak = [t for t in types if means[t] < WEAK_THRESHOLD]
        strong = [t for t in types if means[t] >= WEAK_THRESHOLD]
        if weak and (self.rng.random() < WEAK_SHARE or not strong):
            return self.rng.choice(weak)
        return self.rng.choice(strong)

    async def get_next_item(self) -> TransferTask:
        return self.next_in_turn(self.train_by_type[self.pick_question_type()])

    def on_group_scored(self, item: TransferTask, scores: Sequence[float]) -> None:
        recent = self.performance.setdefault(item.question_type, [])
        recent.append(mean(list(scores)))
        del recent[:-RECENT_GROUPS]

    # -- prompt and reward ------------------------------------------------------------------------------
    def prompt_messages(self, item: TransferTask) -> list[dict[str, str]]:
        assert self.settings is not None
        tokens = "\n".join(f"- {t.symbol}: {t.address}, {t.decimals}" for t in self.settings.tokens.values())
        system = SYSTEM_PROMPT.format(
            budget=self.generation_budget, wallet=self.settings.wallet, tokens=tokens
        )
        return [{"role": "system", "content": system}, {"role": "user", "content": item.request}]

    async def score_transaction(self, reply: str, item: TransferTask) -> float:
        """The reward of one reply (see the module docstring); :class:`ChainError` when the node fails."""
        assert self.settings is not None and self.node is not None
        tx = reply_transaction(reply)
        if tx is None:
            return NO_TRANSACTION
        token = None if item.is_eth else self.settings.tokens[item.token].address
        outcome = await self.node.execute(self.settings.wallet, tx, item.destination, token)
        self.success_buffer.append(1.0 if outcome.succeeded else 0.0)
        return transaction_score(item, token, tx, outcome)

    async def score_replies_async(self, replies: Sequence[str], item: TransferTask) -> list[float]:
        return [await self.score_transaction(reply, item) for reply in replies]

    def eval_sample_fields(self, item: TransferTask) -> dict[str, Any]:
        return {"question_type": item.question_type, "request": item.request}

    def extra_eval_metrics(self, samples: Sequence[dict[str, Any]]) -> dict[str, float]:
        metrics = {
            "eval/valid_transaction_rate": mean(
                [1.0 if s["score"] > NO_TRANSACTION else 0.0 for s in samples]
            )
        }
        for qtype in sorted({s["question_type"] for s in samples}):
            chosen = [s for s in samples if s["question_type"] == qtype]
            metrics[f"eval/percent_correct/{qtype}"] = mean([1.0 if s["correct"] else 0.0 for s in chosen])
        return metrics

    async def wandb_log(self, wandb_metrics: Optional[dict] = None) -> None:
        wandb_metrics = dict(wandb_metrics or {})
        if self.success_buffer:
            wandb_metrics["train/execution_success"] = mean(self.success_buffer)
        self.success_buffer = []
        await super().wandb_log(wandb_metrics)


if __name__ == "__main__":
    EVMEnv.cli()
