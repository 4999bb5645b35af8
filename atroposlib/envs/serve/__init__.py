"""The ``serve`` runtime of an environment: what runs between ``BaseEnv.env_manager()`` and the trajectory API.

* :mod:`~atroposlib.envs.serve.runtime` - the scheduling loop, startup and a clean shutdown;
* :mod:`~atroposlib.envs.serve.workers` - the item workers and the tasks that finish their items;
* :mod:`~atroposlib.envs.serve.api_session` - registration, ``/info`` and status polls;
* :mod:`~atroposlib.envs.serve.scheduling` - worker-count and backpressure arithmetic (pure functions);
* :mod:`~atroposlib.envs.serve.sending` - checking, recording and delivering an item's groups;
* :mod:`~atroposlib.envs.serve.group_validation` - a group made plain JSON and checked before it leaves;
* :mod:`~atroposlib.envs.serve.api_client` - HTTP to the trajectory API (backpressure, retries, spill file);
* :mod:`~atroposlib.envs.serve.jsonl_sink` - the JSONL files an environment writes;
* :mod:`~atroposlib.envs.serve.wandb_logging` - wandb runs, metrics and evaluation files;
* :mod:`~atroposlib.envs.serve.setup_errors` - a failed ``setup()`` as one readable line.

The mixins defined here are parts of :class:`~atroposlib.envs.base.BaseEnv`; import environments' names from
:mod:`atroposlib.envs.base`.
"""
