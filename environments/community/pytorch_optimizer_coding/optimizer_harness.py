"""The optimizer benchmark that runs inside the sandbox: a standalone script (standard library and torch).

It reads one job as JSON on stdin: ``{"nonce", "code", "class_name", "architecture", "seed", "epochs",
"batch_size", "train_size", "test_size", "baseline", "baseline_lr"}`` and writes one line
``<nonce> <json report>`` at the end to the stdout it was started with. The report:
``{"ran", "initial_loss", "baseline_loss", "candidate_loss", "baseline_accuracy", "candidate_accuracy",
"error", "cheat"}`` (losses and accuracies on the held-out set; accuracies None for regression).

Steps: build the task's seeded training data and model; train a copy with the baseline optimizer; only
then execute the candidate source and train another copy of the same initial model on the same batches in
the same order with the candidate class (built as ``Class(model.parameters())``, ``step()`` called after
each backward). A loss that stops being finite ends the run (diverged). The held-out set is drawn after
both trainings from a seed nobody saw, and every model is scored with functions bound before the
candidate ran.

Cheats caught: parameters changed anywhere but inside ``step()`` (in the constructor, by hooks during
backward, between steps), and the training or scoring functions of torch patched. The candidate shares
this interpreter; the environment refuses, before anything runs, the imports and names that reach the
harness's frames or the file system (see ``optimizer_reply``).
"""

from __future__ import annotations

import copy
import json
import math
import os
import sys
import traceback

#: (input features, hidden units, outputs) of each task's model
SHAPES = {"mnist": (64, 32, 10), "classification_small": (16, 32, 4), "tabular": (8, 32, 1)}


class Cheat(Exception):
    """Parameters changed outside ``step()``."""


class Diverged(Exception):
    """The training loss stopped being finite."""


def _one_line(exc: BaseException) -> str:
    return traceback.format_exception_only(type(exc), exc)[-1].strip()[:400]


class Task:
    """A task's data distribution (from the item's seed), its model and its loss."""

    def __init__(self, torch, architecture: str, seed: int) -> None:
        self.torch, self.architecture = torch, architecture
        self.n_in, self.hidden, self.n_out = SHAPES[architecture]
        g = torch.Generator().manual_seed(seed)
        if architecture == "mnist":  # ten 8x8 digit-like prototypes, seen through noise
            self.prototypes = (torch.rand(10, 64, generator=g) > 0.6).float()
        else:  # a random teacher network labels the inputs
            self.w1 = torch.randn(self.n_in, 16, generator=g)
            self.w2 = torch.randn(16, max(self.n_out, 1), generator=g) / 4.0

    def sample(self, n: int, g):
        """``n`` inputs and their targets drawn with generator ``g``."""
        torch = self.torch
        if self.architecture == "mnist":
            y = torch.randint(0, 10, (n,), generator=g)
            return self.prototypes[y] + 0.5 * torch.randn(n, 64, generator=g), y
        x = torch.randn(n, self.n_in, generator=g)
        out = torch.tanh(x @ self.w1) @ self.w2
        if self.architecture == "tabular":
            return x, out + 0.05 * torch.randn(n, 1, generator=g)
        return x, out.argmax(dim=1)

    def model(self, seed: int):
        torch = self.torch
        torch.manual_seed(seed)
        net = torch.nn.Sequential(
            torch.nn.Linear(self.n_in, self.hidden), torch.nn.ReLU(), torch.nn.Linear(self.hidden, self.n_out)
        )
        torch.manual_seed(int.from_bytes(os.urandom(4), "little"))  # the seed is not left readable
        return net

    def loss_fn(self, F):
        return F.mse_loss if self.architecture == "tabular" else F.cross_entropy


def _same(equal, bits, params, snapshot) -> bool:
    """Whether ``params`` hold exactly the bits of ``snapshot`` (NaNs included)."""
    return all(equal(bits(p), s) for p, s in zip(params, snapshot, strict=True))


def train(model, optimizer_factory, batches, loss_fn, equal, int32) -> None:
    """Train ``model`` on ``batches`` with the optimizer ``optimizer_factory`` builds; :class:`Cheat` or
    :class:`Diverged` say what went wrong."""
    params = list(model.parameters())

    def bits(t):
        return t.detach().clone().view(int32)

    snapshot = [bits(p) for p in params]
    optimizer = optimizer_factory(model.parameters())
    for step, (x, y) in enumerate(batches):
        if not _same(equal, bits, params, snapshot):
            where = "the constructor" if step == 0 else "between steps"
            raise Cheat(f"parameters changed outside step() ({where})")
        for p in params:
            p.grad = None
        loss = loss_fn(model(x), y)
        if not math.isfinite(float(loss)):
            raise Diverged(f"diverged: the training loss is {float(loss)} at step {step}")
        loss.backward()
        if not _same(equal, bits, params, snapshot):
            raise Cheat("parameters changed outside step() (during backward)")
        optimizer.step()
        snapshot = [bits(p) for p in params]


def held_out(model, x, y, loss_fn, no_grad, classify: bool) -> tuple[float, float | None]:
    """Loss and (for classification) accuracy of ``model`` on ``x``, ``y``."""
    with no_grad():
        out = model(x)
        loss = float(loss_fn(out, y))
        accuracy = float((out.argmax(dim=1) == y).float().mean()) if classify else None
    return loss, accuracy


def _guarded(torch) -> list[tuple[object, str, object]]:
    """What the training and scoring rely on, to check after the candidate ran that none was patched."""
    F = torch.nn.functional
    pairs = [(F, "cross_entropy"), (F, "mse_loss"), (F, "linear"), (F, "relu"), (torch, "equal")]
    pairs += [(torch.nn.Linear, "forward"), (torch.nn.ReLU, "forward"), (torch.nn.Sequential, "forward")]
    pairs += [(torch.Tensor, "backward"), (torch.Tensor, "clone"), (torch.Tensor, "detach")]
    pairs += [(torch.nn.Module, "__call__"), (torch.nn.Module, "parameters")]
    return [(owner, name, getattr(owner, name)) for owner, name in pairs]


def benchmark(torch, job: dict, report: dict) -> None:
    """Fill ``report`` for ``job`` (see the module docstring)."""
    task = Task(torch, job["architecture"], job["seed"])
    loss_fn, equal, no_grad = task.loss_fn(torch.nn.functional), torch.equal, torch.no_grad
    g = torch.Generator().manual_seed(job["seed"] + 1)
    x, y = task.sample(job["train_size"], g)
    batches = []
    for _ in range(job["epochs"]):
        order = torch.randperm(len(x), generator=g)
        batches += [(x[i], y[i]) for i in order.split(job["batch_size"])]
    initial = task.model(job["seed"])
    baseline_model, candidate_model = copy.deepcopy(initial), copy.deepcopy(initial)
    base_cls = {"adam": torch.optim.Adam, "sgd": torch.optim.SGD}[job["baseline"]]
    train(baseline_model, lambda p: base_cls(p, lr=job["baseline_lr"]), batches, loss_fn, equal, torch.int32)
    guarded = _guarded(torch)
    namespace: dict = {"__name__": "candidate_optimizer"}
    try:
        exec(compile(job["code"], "optimizer.py", "exec"), namespace)
        cls = namespace[job["class_name"]]
        if not (isinstance(cls, type) and issubclass(cls, torch.optim.Optimizer)):
            raise TypeError(f"{job['class_name']} is not a torch.optim.Optimizer subclass")
        train(candidate_model, cls, batches, loss_fn, equal, torch.int32)
    except Cheat as exc:
        report["cheat"] = str(exc)
        return
    except BaseException as exc:  # noqa: BLE001 - a crash or a divergence is an outcome, whatever it raises
        report["error"] = str(exc) if isinstance(exc, Diverged) else _one_line(exc)
        return
    changed = [name for owner, name, value in guarded if getattr(owner, name) is not value]
    if changed:
        report["cheat"] = f"patched torch: {', '.join(changed)}"
        return
    secret = torch.Generator().manual_seed(int.from_bytes(os.urandom(8), "little"))
    test_x, test_y = task.sample(job["test_size"], secret)
    classify = job["architecture"] != "tabular"
    report["initial_loss"], _ = held_out(initial, test_x, test_y, loss_fn, no_grad, classify)
    report["baseline_loss"], report["baseline_accuracy"] = held_out(
        baseline_model, test_x, test_y, loss_fn, no_grad, classify
    )
    report["candidate_loss"], report["candidate_accuracy"] = held_out(
        candidate_model, test_x, test_y, loss_fn, no_grad, classify
    )
    report["ran"] = True


def main() -> None:
    job = json.loads(sys.stdin.buffer.read())
    nonce = job.pop("nonce")
    channel = os.dup(1)  # the report's descriptor; the candidate's prints go to stderr
    os.dup2(2, 1)
    write, dumps, leave = os.write, json.dumps, os._exit
    report: dict = {"ran": False, "error": None, "cheat": None}
    import torch

    torch.set_num_threads(1)
    try:
        benchmark(torch, job, report)
    except BaseException as exc:  # noqa: BLE001
        report["error"] = report["error"] or _one_line(exc)
    sys.stdout.flush()
    write(channel, f"{nonce} {dumps(report)}\n".encode())
    leave(0)


if __name__ == "__main__":
    main()
