"""Send OpenAI completion requests that name the base model to the active LoRA adapter (vLLM server).

After ``POST /lora/load`` an environment that keeps using the base model's name on ``/v1/completions`` or
``/v1/chat/completions`` samples from the adapter, as ``/generate`` does.
"""

from __future__ import annotations

import json
from typing import Any

from fastapi import FastAPI

from example_trainer.inference.vllm_backend import BridgeState

#: The OpenAI routes whose ``model`` field is redirected to the active LoRA adapter.
LORA_REDIRECT_PATHS = ("/v1/completions", "/v1/chat/completions")


class ActiveLoraMiddleware:
    """Send OpenAI completion requests that name the base model to the active LoRA adapter.

    After ``/lora/load`` an environment keeps using the base model's name and still samples
    from the adapter, just as ``/generate`` does. Requests naming another model (or an adapter)
    pass through untouched.
    """

    def __init__(self, app: Any, fastapi_app: FastAPI) -> None:
        self.app = app
        self.fastapi_app = fastapi_app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        state: BridgeState | None = getattr(self.fastapi_app.state, "atropos_bridge", None)
        if (
            scope["type"] != "http"
            or scope.get("method") != "POST"
            or state is None
            or state.active_lora is None
            or scope["path"].removeprefix(scope.get("root_path", "")) not in LORA_REDIRECT_PATHS
        ):
            await self.app(scope, receive, send)
            return
        chunks = []
        more = True
        while more:
            message = await receive()
            if message["type"] != "http.request":
                break
            chunks.append(message.get("body", b""))
            more = message.get("more_body", False)
        body = b"".join(chunks)
        body = self._rewrite(body, state)
        sent = False

        async def replay() -> dict[str, Any]:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        if any(k == b"content-length" for k, _ in scope.get("headers", [])):
            headers = [(k, v) for k, v in scope["headers"] if k != b"content-length"]
            headers.append((b"content-length", str(len(body)).encode()))
            scope = {**scope, "headers": headers}
        await self.app(scope, replay, send)

    def _rewrite(self, body: bytes, state: BridgeState) -> bytes:
        try:
            payload = json.loads(body)
        except ValueError:
            return body  # let the route report the bad JSON
        if not isinstance(payload, dict):
            return body
        models = getattr(self.fastapi_app.state, "openai_serving_models", None)
        model = payload.get("model")
        if model is not None and (models is None or not models.is_base_model(model)):
            return body
        payload["model"] = state.active_lora.lora_name
        return json.dumps(payload).encode()
