"""``view-run``: a Gradio page to look at the scored groups of a run, live, without disturbing it.

By default it reads the API's read-only ``GET /inspect/recent`` and refreshes on a timer; it never
resets the API, registers or takes the trainer's batches unless asked (``--reset``, ``--register``,
``--consume``). ``--jsonl PATH`` shows a file written by an environment's ``process`` command
instead (followed as it grows). The page binds to 127.0.0.1 and never creates a public share link.
"""

from __future__ import annotations

import argparse
import inspect
import os
import socket
import sys
import threading
import time
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from atroposlib.cli._tooling.client import (
    DEFAULT_API_URL,
    ApiClient,
    AuthRejected,
    Unreachable,
    add_api_key_argument,
    add_register_size_arguments,
    resolve_api_key,
)
from atroposlib.cli._tooling.errors import ToolError, run_cli
from atroposlib.cli._tooling.render import histogram_svg, render_empty, render_group
from atroposlib.cli._tooling.sources import BatchConsumer, GroupRecord
from atroposlib.cli._tooling.store import GroupStore, JsonlTail, ReadOnlyApiSource, navigate
from atroposlib.cli._tooling.text import load_tokenizer

PROG = "view-run"
DEFAULT_TOKENIZER = "NousResearch/DeepHermes-3-Llama-3-8B-Preview"
#: Gradio's usual port; clear of the API (8000) and the inference servers (9000 and up).
DEFAULT_PORT = 7860
ALL_ENVS = "All envs"
NAVIGATION_ACTIONS = ("first", "prev", "next", "last", "grab")


def build_parser(
    prog: str = PROG, default_tokenizer: str = DEFAULT_TOKENIZER, default_port: int = DEFAULT_PORT
) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog, description="Browse the scored groups of an Atropos run")
    parser.add_argument(
        "--port", type=int, default=default_port, help="port of the web page (default: %(default)s)"
    )
    parser.add_argument(
        "--host", default="127.0.0.1", help="address the web page binds to (default loopback)"
    )
    add_register_size_arguments(parser)
    parser.add_argument(
        "--tokenizer",
        default=default_tokenizer,
        help="tokenizer (hub name or local path) to decode tokens, loaded once; 'none' to show messages only",
    )
    parser.add_argument("--api-url", default=DEFAULT_API_URL, help="trajectory API to read")
    add_api_key_argument(parser)
    parser.add_argument(
        "--jsonl", default=None, metavar="PATH", help="show a `process` JSONL file instead of an API"
    )
    parser.add_argument(
        "--refresh-interval", type=float, default=5.0, help="seconds between live refreshes (0: off)"
    )
    parser.add_argument(
        "--history", type=int, default=64, help="recent groups asked from the API per refresh"
    )
    parser.add_argument("--keep", type=int, default=1000, help="most groups kept in the page")
    parser.add_argument("--env-id", type=int, default=None, help="only show this env's groups")
    parser.add_argument(
        "--consume",
        action="store_true",
        help="add a 'Grab Next Batch' button that takes batches with GET /batch (the trainer will NOT get them)",
    )
    parser.add_argument(
        "--register",
        action="store_true",
        help="with --consume: POST /register first (for a run without a trainer)",
    )
    parser.add_argument("--reset", action="store_true", help="call GET /reset_data at start (wipes the run)")
    parser.add_argument(
        "--batch-wait", type=float, default=30.0, help="seconds 'Grab Next Batch' waits for a batch"
    )
    return parser


class TokenizerSlot:
    """The viewer's tokenizer, loaded once: from a local path or cache at once, else from the hub in
    the background so the page starts without waiting for (possibly unreachable) downloads."""

    def __init__(self, name: str | None, prog: str = PROG) -> None:
        self.name = name
        self.prog = prog
        self.tokenizer: Any | None = None
        self.problem: str | None = None
        self.loading = False
        self.version = 0  # bumped when the tokenizer arrives, so cached pages are re-rendered
        if not name or name.lower() == "none":
            return
        self.tokenizer = load_tokenizer(name, required=False, local_files_only=True)
        if self.tokenizer is None:
            self.loading = True
            threading.Thread(target=self._load_from_hub, name="tokenizer-loader", daemon=True).start()

    def _load_from_hub(self) -> None:
        try:
            self.tokenizer = load_tokenizer(self.name, required=True)
            self.version += 1
        except ToolError as exc:
            self.problem = f"{exc}: showing messages (or token ids) instead"
            print(f"{self.prog}: warning: {self.problem}", file=sys.stderr, flush=True)
        finally:
            self.loading = False

    @property
    def notice(self) -> str | None:
        if self.loading:
            return f"loading tokenizer {self.name!r}; showing messages until it is ready"
        return self.problem


@dataclass
class Viewer:
    """Everything the page's callbacks need."""

    store: GroupStore
    tokenizer_slot: TokenizerSlot
    source_label: str
    consumer: BatchConsumer | None = None
    batch_wait: float = 30.0
    notice: str | None = None
    multimodal: bool = False

    def __post_init__(self) -> None:
        self._html_cache: OrderedDict[tuple[int, str, int], str] = OrderedDict()

    @property
    def tokenizer(self) -> Any | None:
        return self.tokenizer_slot.tokenizer

    def group_html(self, key: int, record: GroupRecord, position: str) -> str:
        cache_key = (key, position, self.tokenizer_slot.version)
        html = self._html_cache.get(cache_key)
        if html is None:
            html = render_group(record, self.tokenizer, position)
            self._html_cache[cache_key] = html
            while len(self._html_cache) > 256:
                self._html_cache.popitem(last=False)
        return html

    def status_line(self) -> str:
        """Source, trainer step, number of groups, notices and errors (Markdown)."""
        parts = [f"**Source:** {self.source_label}"]
        if self.store.current_step is not None:
            parts.append(f"**Trainer step:** {self.store.current_step}")
        parts.append(f"**Groups loaded:** {len(self.store.items())}")
        line = " · ".join(parts)
        for notice in (getattr(self.store.source, "notice", None), self.notice, self.tokenizer_slot.notice):
            if notice:
                line += f"\n\nℹ️ {notice}"
        if self.store.missed:
            line += (
                f"\n\n⚠️ {self.store.missed} groups arrived faster than the page refreshed and were not loaded"
            )
        if self.store.error:
            line += f"\n\n⚠️ {self.store.error}"
        return line

    def grab_batch(self) -> str | None:
        """Take the next batch (``--consume``), waiting up to ``batch_wait`` s. Returns a problem or None."""
        assert self.consumer is not None
        deadline = time.monotonic() + self.batch_wait
        while True:
            try:
                result = self.consumer.poll()
            except ToolError as exc:
                return str(exc)
            if result.records:
                if result.current_step is not None:
                    self.store.current_step = result.current_step
                self.store.add(result.records)
                self.consumer.done()
                return None
            if time.monotonic() >= deadline:
                return f"no batch was ready within {self.batch_wait:g} s"
            time.sleep(1.0)


def _images_and_prompt(viewer: Viewer, record: GroupRecord) -> tuple[list[Any], str]:
    """The group's images and its human-readable text prompt (multimodal page)."""
    from atroposlib.cli._tooling.images import group_images, text_prompt
    from atroposlib.cli._tooling.render import build_display
    from atroposlib.cli._tooling.text import message_text, split_conversations

    prefix = build_display(record.group, viewer.tokenizer).prompt
    messages = record.group.get("messages")
    text = ""
    if isinstance(messages, list) and messages:
        shared, _ = split_conversations(messages)
        text = "\n\n".join(message_text(m) for m in shared if isinstance(m, dict) and m.get("role") == "user")
    return group_images(record.group, prefix), text or text_prompt(prefix)


@dataclass
class _Page:
    """The components of the viewer page that its events read or write."""

    status: Any
    buttons: dict[str, Any]  #: action -> button, for the navigation and refresh buttons
    follow: Any
    env: Any
    grab: Any
    group_view: Any
    overall: Any
    position: Any
    #: Whether the view follows the newest group. The checkbox shows it, but handlers read this
    #: server-side copy, which is current when they run; the checkbox value an event carries was
    #: captured when it was triggered, possibly before a navigation that unticked it.
    following: Any
    gallery: Any = None
    prompt_box: Any = None

    @property
    def inputs(self) -> list[Any]:
        return [self.position, self.following, self.env]

    @property
    def outputs(self) -> list[Any]:
        base = [
            self.position,
            self.following,
            self.follow,
            self.env,
            self.status,
            self.group_view,
            self.overall,
        ]
        return base + ([self.gallery, self.prompt_box] if self.gallery is not None else [])


def _build_page(gr: Any, viewer: Viewer, title: str) -> _Page:
    """Lay out the page's components (inside an open ``gr.Blocks``)."""
    gr.Markdown(f"## {title}")
    status = gr.Markdown(elem_id="av-status")
    with gr.Row():
        buttons = {
            "first": gr.Button("« Oldest", size="sm"),
            "prev": gr.Button("‹ Previous", size="sm"),
            "next": gr.Button("Next ›", size="sm"),
            "last": gr.Button("Newest »", size="sm"),
            "refresh": gr.Button("Refresh", size="sm"),
        }
        follow = gr.Checkbox(value=True, label="Follow newest")
        env = gr.Dropdown(choices=[ALL_ENVS], value=ALL_ENVS, label="Environment", allow_custom_value=True)
    grab = gr.Button("Grab Next Batch (takes it from the trainer)", visible=viewer.consumer is not None)
    gallery = prompt_box = None
    if viewer.multimodal:
        with gr.Row():
            gallery = gr.Gallery(label="Images", elem_id="av-images", height=260, columns=4)
            prompt_box = gr.Textbox(label="Text Prompt", elem_id="av-text-prompt", lines=6)
    group_view = gr.HTML(elem_id="av-group")
    with gr.Accordion("Scores of all loaded groups", open=False):
        overall = gr.HTML(elem_id="av-overall")
    position, following = gr.State(None), gr.State(True)
    return _Page(
        status, buttons, follow, env, grab, group_view, overall, position, following, gallery, prompt_box
    )


def _move_for(action: str, follow_newest: bool) -> tuple[str, bool]:
    """The navigation move an event makes, and whether the view follows the newest group after it."""
    if action in ("first", "prev", "next"):
        follow_newest = False
    elif action in ("last", "grab"):
        follow_newest = True
    if action in ("first", "prev", "next", "last"):
        return action, follow_newest
    return ("last" if follow_newest else "stay"), follow_newest


def _group_panel(viewer: Viewer, key: Any, keys: list[Any]) -> tuple[str, GroupRecord | None]:
    """The HTML of the shown group (or of the waiting message) and its record."""
    if key is None:
        waiting = viewer.store.error or "No groups yet: waiting for the environments to send some."
        return render_empty(waiting), None
    record = viewer.store.get(key)
    shown = keys.index(key) + 1
    return viewer.group_html(key, record, f"group {shown} of {len(keys)}"), record


def _show(
    gr: Any, viewer: Viewer, action: str, position: Any, follow_newest: bool, env_name: str | None
) -> list:
    """Apply one page event (``action``) and return the new values of :attr:`_Page.outputs`."""
    problem = None
    if action == "refresh":
        viewer.store.refresh(force=True)
    elif action == "grab":
        problem = viewer.grab_batch()
    env_filter = None if env_name in (None, "", ALL_ENVS) else env_name
    keys = [k for k, _ in viewer.store.items(env_filter)]
    move, follow_newest = _move_for(action, follow_newest)
    key = navigate(keys, position, move)
    # Only the choices are refreshed, never the selected env, and the follow box only changes on
    # navigation.
    env_update = gr.Dropdown(choices=[ALL_ENVS, *viewer.store.env_labels()])
    follow_update = follow_newest if action in NAVIGATION_ACTIONS else gr.update()
    html, record = _group_panel(viewer, key, keys)
    line = viewer.status_line()
    if problem:
        line += f"\n\n⚠️ {problem}"
    overall_html = histogram_svg(
        viewer.store.all_scores(env_filter), "Scores of all loaded groups", width=480
    )
    result = [key, follow_newest, follow_update, env_update, line, html, overall_html]
    if viewer.multimodal:
        images, text = _images_and_prompt(viewer, record) if record is not None else ([], "")
        result += [images, text]
    return result


def _connect_events(gr: Any, demo: Any, viewer: Viewer, page: _Page, refresh_interval: float) -> None:
    """Wire the buttons, the env choice, the page load and the refresh timer to :func:`_show`."""
    inputs, outputs = page.inputs, page.outputs
    # One queue for every event that moves the view, so each sees the state the previous left.
    serial = {"concurrency_id": "view", "concurrency_limit": 1}

    def handler(action: str):
        return lambda p, f, e: _show(gr, viewer, action, p, f, e)

    for action, button in page.buttons.items():
        button.click(handler(action), inputs, outputs, **serial)
    page.follow.input(lambda ticked: ticked, page.follow, page.following, **serial)
    page.env.change(handler("env"), inputs, outputs, **serial)
    # Not queued with the rest: it may wait for a batch, and the queue is shared by all pages.
    page.grab.click(handler("grab"), inputs, outputs, api_name="get_batch")
    demo.load(handler("refresh"), inputs, outputs, **serial)
    if refresh_interval > 0:
        # The timer only polls and reports a data version; the page re-renders through the
        # version's change event, queued behind any navigation (re-rendering from the tick
        # itself would use inputs captured before a concurrent click and undo it).
        version = gr.Textbox(value="", visible=False)

        def tick() -> tuple[str, str]:
            viewer.store.refresh()
            return f"{viewer.store.version}-{viewer.tokenizer_slot.version}", viewer.status_line()

        gr.Timer(refresh_interval).tick(tick, None, [version, page.status])
        version.change(handler("tick"), inputs, outputs, **serial)


def build_app(viewer: Viewer, *, title: str = "Atropos run viewer", refresh_interval: float = 5.0) -> Any:
    """The Gradio Blocks page for ``viewer`` (not launched)."""
    import gradio as gr

    with gr.Blocks(title=title, analytics_enabled=False) as demo:
        page = _build_page(gr, viewer, title)
        _connect_events(gr, demo, viewer, page, refresh_interval)
    return demo


def check_port_free(host: str, port: int) -> None:
    """ToolError naming ``--port`` when ``host:port`` cannot be bound (another program listens there)."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM) as sock:
        # As the web server will: a port left in TIME_WAIT by a previous run is free.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            raise ToolError(
                f"cannot serve on {host}:{port} ({exc.strerror or exc}); pick another port with --port N"
            )


def _launch(demo: Any, host: str, port: int, prog: str) -> None:
    """Serve locally until interrupted: never a share link (nor the hint to make one); keyword arguments
    this Gradio version lacks are left out."""
    check_port_free(host, port)
    wanted = {
        "server_name": host,
        "server_port": port,
        "share": False,
        "show_error": True,
        "ssr_mode": False,
        "quiet": True,
        "prevent_thread_lock": True,
    }
    accepted = inspect.signature(demo.launch).parameters
    try:
        demo.queue().launch(**{k: v for k, v in wanted.items() if k in accepted})
    except OSError as exc:  # the port was taken between the check and the launch
        raise ToolError(f"cannot serve on {host}:{port} ({exc}); pick another port with --port N")
    print(f"{prog}: serving on http://{host}:{port}", file=sys.stderr, flush=True)
    demo.block_thread()


def prepare(args: argparse.Namespace, prog: str) -> Viewer:
    """Open the source (and do what --reset/--register ask), load the tokenizer once."""
    if args.jsonl and (args.consume or args.register or args.reset):
        raise ToolError("--jsonl shows a file; it cannot be combined with --consume/--register/--reset")
    if args.register and not args.consume:
        raise ToolError(
            "--register only makes sense with --consume (the read-only view needs no registration)"
        )
    tokenizer = TokenizerSlot(args.tokenizer, prog)
    if args.jsonl:
        store = GroupStore(JsonlTail(args.jsonl), max_groups=args.keep)
        store.refresh(force=True)
        return Viewer(store, tokenizer, f"file `{args.jsonl}`")
    client = ApiClient(args.api_url, resolve_api_key(args.api_key))
    try:
        client.info()
    except AuthRejected:
        raise
    except Unreachable as exc:
        print(f"{prog}: warning: {exc}; the page will keep retrying", file=sys.stderr)
    if args.reset:
        print(f"{prog}: reset: {client.reset().strip()}", file=sys.stderr)
    if args.consume:
        if args.register:
            client.register(batch_size=args.group_size * 8, max_token_len=args.max_token_len, num_steps=69)
        store = GroupStore(None, max_groups=args.keep)
        label = f"API `{args.api_url}` (consuming batches: the trainer does not get them)"
        return Viewer(store, tokenizer, label, consumer=BatchConsumer(client), batch_wait=args.batch_wait)
    source = ReadOnlyApiSource(client, limit=args.history, env_id=args.env_id)
    store = GroupStore(
        source, max_groups=args.keep, min_interval=min(1.0, max(0.1, args.refresh_interval / 2))
    )
    store.refresh(force=True)
    return Viewer(store, tokenizer, f"API `{args.api_url}` (read-only)")


def run(
    argv: Sequence[str] | None,
    *,
    prog: str,
    default_tokenizer: str,
    multimodal: bool,
    title: str,
    default_port: int = DEFAULT_PORT,
) -> int:
    args = build_parser(prog, default_tokenizer, default_port).parse_args(argv)
    os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")

    def body() -> int:
        check_port_free(args.host, args.port)
        viewer = prepare(args, prog)  # flag and source problems first: they need no gradio
        try:
            import gradio  # noqa: F401
        except ImportError:
            raise ToolError("gradio is not installed: pip install 'atroposlib[examples]'")
        viewer.multimodal = multimodal
        demo = build_app(viewer, title=title, refresh_interval=args.refresh_interval)
        _launch(demo, args.host, args.port, prog)
        return 0

    return run_cli(prog, body)


def main(argv: Sequence[str] | None = None) -> int:
    return run(
        argv, prog=PROG, default_tokenizer=DEFAULT_TOKENIZER, multimodal=False, title="Atropos run viewer"
    )


if __name__ == "__main__":
    raise SystemExit(main())
