"""``tether eval --backend URL``: tether's pipeline in-process, generation on a real llama-server."""

from __future__ import annotations

from tether.evals.local import Target, open_client
from tether.evals.name_fix import FEW_SHOT, TOOLS


async def test_eval_runs_tethers_pipeline_in_front_of_llama_server(llama_server: str) -> None:
    messages = [{"role": "system", "content": FEW_SHOT}, {"role": "user", "content": "show me main.py"}]
    tools = [t.to_openai() for t in TOOLS]
    async with open_client(Target(backend=llama_server, n_ctx=4096)) as client:
        assert client.kind == "tether"
        names = await client.chat(messages, tools, "names", tool_choice="required", max_tokens=48)
        bare = await client.chat(messages, tools, "bare", tool_choice="required", max_tokens=48)
    # Layer 0 reached llama-server as a grammar: an offered name; without it, no call at all.
    called = [c["function"]["name"] for c in names.message.get("tool_calls") or []]
    assert called and set(called) <= {t.name for t in TOOLS}
    assert not bare.message.get("tool_calls")
