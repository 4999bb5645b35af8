"""Name -> reward-function registry with lazy loading of the modules in this package."""

from __future__ import annotations

import importlib
import inspect
import logging
import pkgutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .reward_function import RewardFunction

logger = logging.getLogger(__name__)

PACKAGE = __name__.rsplit(".", 1)[0]


def normalized_class_key(cls: type) -> str:
    """Registry key of a class: lower-cased name without a trailing ``reward`` (``AccuracyReward`` ->
    ``accuracy``)."""
    key = cls.__name__.lower()
    return key[: -len("reward")] if key.endswith("reward") and len(key) > len("reward") else key


class RewardRegistry:
    """Maps names to :class:`RewardFunction` subclasses (or legacy plain functions) and builds instances.

    Names that are not registered yet are looked up in this package: ``<base>.py``, ``<base>_reward.py``
    or ``<name>.py`` (``base`` = name without ``_reward``), and failing that every module of the package,
    so that ``create("r1")``, ``create("reasoningsteps")`` or ``create("cascading_r1_math")`` work without an
    explicit import.
    """

    def __init__(self) -> None:
        self._registry: dict[str, type[RewardFunction] | Callable] = {}
        self._reward_fns_dir = Path(__file__).parent

    def register(self, cls: type | None = None, name: str | None = None):
        """Register a RewardFunction subclass; usable as ``@register``, ``@register(name=...)`` or a call.

        Raises:
            TypeError: ``cls`` is not a RewardFunction subclass.
        """

        def _register(target: type) -> type:
            if not inspect.isclass(target) or not issubclass(target, RewardFunction):
                raise TypeError(
                    f"{getattr(target, '__name__', target)!r} is not a subclass of RewardFunction"
                )
            key = name or normalized_class_key(target)
            self._registry[key] = target
            logger.debug("registered reward function %r", key)
            return target

        return _register if cls is None else _register(cls)

    def register_function(self, name: str, function: Callable) -> None:
        """Register a plain function ``f(completions, **kwargs) -> list[float] | float`` (or a class)."""
        self._registry[name] = function

    def get(self, name: str) -> type[RewardFunction] | Callable:
        """The class or function registered under ``name``, loading it first if needed.

        Raises:
            ImportError: no module of the package provides ``name``.
        """
        if name not in self._registry:
            self._load_reward_function(name)
        return self._registry[name]

    def create(self, name_or_config: str | dict, **kwargs: Any) -> RewardFunction:
        """Instantiate a reward function.

        ``name_or_config`` is a registered name, or a dict ``{"type": name, "params": {...}, **more}`` whose
        ``params`` and other keys override ``kwargs``. Plain functions are wrapped in
        :class:`LegacyFunctionWrapper`.

        Raises:
            ValueError: a dict without ``"type"``.
            ImportError: unknown name.
        """
        if isinstance(name_or_config, str):
            reward_type, params = name_or_config, dict(kwargs)
        elif isinstance(name_or_config, dict):
            config = dict(name_or_config)
            if "type" not in config:
                raise ValueError(f"reward config needs a 'type' key: {name_or_config!r}")
            reward_type = config.pop("type")
            config.update(config.pop("params", None) or {})
            params = {**kwargs, **config}
        else:
            raise TypeError(f"expected a reward name or config dict, got {type(name_or_config).__name__}")
        target = self.get(reward_type)
        if not inspect.isclass(target):
            return LegacyFunctionWrapper(target, **params)
        return target(**params)

    def list_registered(self) -> list[str]:
        """Names registered so far (lazy names appear once loaded)."""
        return list(self._registry.keys())

    def available_names(self) -> list[str]:
        """Every name :meth:`get` resolves, sorted: the registered keys once all modules of this package are
        imported, plus, for a module that registers no class, its name without ``_reward`` (its plain
        function, e.g. ``cascading_r1_math``). Modules that fail to import are left out."""
        names = set()
        for stem in self._all_modules():
            try:
                module = importlib.import_module(f"{PACKAGE}.{stem}")
            except Exception as exc:
                logger.debug("reward module %s.py not importable: %r", stem, exc)
                continue
            if not any(getattr(t, "__module__", None) == module.__name__ for t in self._registry.values()):
                base = stem[: -len("_reward")] if stem.endswith("_reward") else stem
                if self._pick_from_module(module, base) is not None:
                    names.add(base)
        return sorted(names | set(self._registry))

    def load_required_functions(self, config: Any) -> set[str]:
        """Load every reward named by a config object and return the names.

        Reads ``config.datasets[*].dataset_reward_funcs`` / ``reward_funcs`` / ``types[*]["reward_funcs"]``
        and the top-level ``reward_functions`` / ``reward_funcs`` (strings or ``{"type": ...}`` dicts).
        """
        names: set[str] = set()

        def add(items: Any) -> None:
            for item in items or []:
                if isinstance(item, str):
                    names.add(item)
                elif isinstance(item, dict) and "type" in item:
                    names.add(item["type"])

        for dataset in getattr(config, "datasets", None) or []:
            for field in ("dataset_reward_funcs", "reward_funcs"):
                add(getattr(dataset, field, None))
            for type_config in getattr(dataset, "types", None) or []:
                if isinstance(type_config, dict):
                    add(type_config.get("reward_funcs"))
        for field in ("reward_functions", "reward_funcs"):
            add(getattr(config, field, None))
        for name in names:
            self.get(name)
        return names

    # -- lazy loading -----------------------------------------------------------------------------------

    def _candidate_modules(self, name: str) -> list[str]:
        base = name[: -len("_reward")] if name.endswith("_reward") else name
        stems = []
        for stem in (base, f"{base}_reward", name):
            if stem not in stems and (self._reward_fns_dir / f"{stem}.py").exists():
                stems.append(stem)
        return stems

    def _all_modules(self) -> list[str]:
        return sorted(
            info.name
            for info in pkgutil.iter_modules([str(self._reward_fns_dir)])
            if not info.name.startswith("_") and info.name not in ("registry", "reward_function")
        )

    def _load_reward_function(self, name: str) -> None:
        errors: list[str] = []
        for stem in self._candidate_modules(name):
            try:
                module = importlib.import_module(f"{PACKAGE}.{stem}")
            except Exception as exc:
                errors.append(f"{stem}.py: {exc!r}")
                continue
            if name in self._registry:  # the module's own @register decorators provided it
                return
            target = self._pick_from_module(module, name)
            if target is not None:
                self.register_function(name, target)
                return
            errors.append(f"{stem}.py defines no reward matching {name!r}")

        # Registry keys (e.g. "reasoningsteps") need not match file names: import every module once.
        wanted = name.replace("_", "")
        for stem in self._all_modules():
            try:
                importlib.import_module(f"{PACKAGE}.{stem}")
            except Exception as exc:
                errors.append(f"{stem}.py: {exc!r}")
                continue
            if name in self._registry:
                return
        for key, target in list(self._registry.items()):
            if key.replace("_", "") == wanted:
                self._registry[name] = target
                return
        detail = "; ".join(errors) if errors else "no module in the package provides it"
        raise ImportError(f"unknown reward function {name!r} ({detail})")

    @staticmethod
    def _pick_from_module(module: Any, name: str) -> type | Callable | None:
        """The reward a module offers for ``name`` when its decorators did not register that exact key."""
        base = name[: -len("_reward")] if name.endswith("_reward") else name
        wanted = {name.replace("_", ""), base.replace("_", "")}
        classes = [
            obj
            for _, obj in inspect.getmembers(module, inspect.isclass)
            if issubclass(obj, RewardFunction)
            and obj is not RewardFunction
            and obj.__module__ == module.__name__
        ]
        for cls in classes:
            if normalized_class_key(cls) in wanted or cls.__name__.lower() in wanted:
                return cls
        if len(classes) == 1:
            return classes[0]
        for fn_name in (base, f"{base}_reward", "format_reward"):
            fn = getattr(module, fn_name, None)
            if callable(fn) and not inspect.isclass(fn):
                return fn
        return None


class LegacyFunctionWrapper(RewardFunction):
    """Adapts a plain reward function ``f(completions, **kwargs)`` to :class:`RewardFunction`.

    Its name is the function's name; a scalar result is broadcast to every completion. Extra constructor
    keyword arguments are passed to the function on every call (call-time keywords win).
    """

    def __init__(self, func: Callable, weight: float = 1.0, **kwargs: Any):
        super().__init__(weight=weight, **kwargs)
        self.func = func
        self._func_name = getattr(func, "__name__", type(func).__name__)

    @property
    def name(self) -> str:
        return self._name or self._func_name

    def compute(self, completions: list[Any], **kwargs: Any) -> list[float]:
        result = self.func(completions, **{**self.config, **kwargs})
        if not isinstance(result, (list, tuple)):
            return [result] * len(completions)
        return list(result)


#: The global registry used by environments (``from atroposlib.envs.reward_fns import registry``).
registry = RewardRegistry()
