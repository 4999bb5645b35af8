"""BFCL (the Berkeley Function Calling Leaderboard) on its own data and AST checker.

* :mod:`~atroposlib.evals.bfcl.data` - the question and possible-answer files of the installed
  ``bfcl-eval`` package (installed with ``--no-deps``: ``python -m atroposlib.evals.bfcl install``);
* :mod:`~atroposlib.evals.bfcl.prompt` - an entry as a chat with its tools declared for Hermes calls;
* :mod:`~atroposlib.evals.bfcl.checker` - a reply's ``<tool_call>`` blocks scored by BFCL's ``ast_checker``;
* :mod:`~atroposlib.evals.bfcl.scores` - per-category accuracy and the leaderboard's aggregates;
* :mod:`~atroposlib.evals.bfcl.env` - BFCL as the evaluation of a single-turn environment
  (``environments/eval_environments/bfcl_eval.py``, ``tool_calling_server.py --env.eval_benchmark bfcl``).
"""

from atroposlib.evals.bfcl.checker import Verdict, check_reply, decode_reply, reference_reply
from atroposlib.evals.bfcl.data import (
    AST_CATEGORIES,
    BFCL_EVAL_REQUIREMENT,
    CATEGORIES,
    RELEVANCE_CATEGORIES,
    BfclItem,
    BfclUnavailable,
    load_category,
)
from atroposlib.evals.bfcl.prompt import prompt_messages
from atroposlib.evals.bfcl.scores import category_scores

__all__ = [
    "AST_CATEGORIES",
    "BFCL_EVAL_REQUIREMENT",
    "CATEGORIES",
    "RELEVANCE_CATEGORIES",
    "BfclItem",
    "BfclUnavailable",
    "Verdict",
    "category_scores",
    "check_reply",
    "decode_reply",
    "load_category",
    "prompt_messages",
    "reference_reply",
]
