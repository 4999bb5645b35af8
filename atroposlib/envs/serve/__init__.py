"""The ``serve`` runtime of an environment: :class:`~atroposlib.envs.serve.runtime.EnvRunner` and its parts.

* :mod:`~atroposlib.envs.serve.runtime` - :class:`EnvRunner`: holds an env; startup, the scheduling loop,
  step-triggered evaluations and checkpoints, a clean shutdown;
* :mod:`~atroposlib.envs.serve.workers` - :class:`WorkerPool`: the item workers and the tasks that finish items;
* :mod:`~atroposlib.envs.serve.api_session` - :class:`ApiSession`: registration, ``/info`` and status polls;
* :mod:`~atroposlib.envs.serve.sending` - :class:`GroupSender`: checking, recording and delivering groups;
* :mod:`~atroposlib.envs.serve.wandb_logging` - :class:`WandbReporter`: wandb runs, metrics, evaluation files;
* :mod:`~atroposlib.envs.serve.shutdown` - :class:`ShutdownControl`: stop requests, wake-ups and signals;
* :mod:`~atroposlib.envs.serve.scheduling` - worker-count and backpressure arithmetic (pure functions);
* :mod:`~atroposlib.envs.serve.group_validation` - a group made plain JSON and checked before it leaves;
* :mod:`~atroposlib.envs.serve.api_client` - HTTP to the trajectory API (backpressure, retries, spill file);
* :mod:`~atroposlib.envs.serve.jsonl_sink` - the JSONL files an environment writes;
* :mod:`~atroposlib.envs.serve.setup_errors` - a failed ``setup()`` as one readable line.

Environments import their names from :mod:`atroposlib.envs.base`; ``BaseEnv.__init__`` builds the env's
runner (``env.runner``).
"""
