#!/usr/bin/env python3
"""An orchestrator in the style of the devcontainer-sandbox driver, on airlock.

It starts one sandbox for a task with
  * an LLM route: the worker calls http://airlock.internal/llm/... and airlock forwards to
    the provider with the real API key injected (the worker never holds it);
  * a git secret: the worker sees a surrogate of GIT_TOKEN that airlock swaps for the real
    one only on the git host;
runs a worker inside that prints JSON lines, streams and handles them as they come, and
tears the sandbox down whatever happens.

    LLM_API_KEY=sk-... GIT_TOKEN=ghp_... python3 examples/python/orchestrator.py

The real keys are read from this process's environment and handed to airlock's daemon
only. Flags point the example elsewhere (the test suite runs it against a loopback server
with --resolve and --upstream-ca); see --help.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import urllib.parse
from pathlib import Path

import airlock

# The worker: runs inside the sandbox (sent on standard input to `python3 -`) and reports
# on standard output, one JSON object per line.
WORKER = r'''
import json, os, sys, urllib.request

def emit(event, **fields):
    print(json.dumps({"event": event, **fields}), flush=True)

emit("started", cwd=os.getcwd())
token = os.environ.get("GIT_TOKEN", "")
emit("git_credentials", present=bool(token), length=len(token))
request = urllib.request.Request(
    os.environ["LLM_BASE_URL"] + "chat/completions",
    data=json.dumps({"model": "demo", "messages": [{"role": "user", "content": "plan the fix"}]}).encode(),
    headers={"Content-Type": "application/json", "Authorization": "Bearer not-a-real-key"},
)
with urllib.request.urlopen(request, timeout=30) as answer:
    emit("llm", status=answer.status, body=answer.read().decode()[:200])
for step in ("edit", "test", "commit"):
    emit("step", name=step)
emit("done", ok=True)
'''


def policy_yaml(llm_upstream: str, git_host: str) -> str:
    llm_host = urllib.parse.urlsplit(llm_upstream).hostname
    return f"""version: 1
network:
  allow:
    - host: {git_host}
secrets:
  LLM_API_KEY:
    env: LLM_API_KEY
    hosts: [{llm_host}]
    inject: {{header: Authorization, format: "Bearer {{value}}"}}
  GIT_TOKEN:
    env: GIT_TOKEN
    hosts: [{git_host}]
routes:
  - prefix: /llm/
    upstream: {llm_upstream}
    secret: LLM_API_KEY
"""


async def orchestrate(args: argparse.Namespace) -> int:
    with tempfile.TemporaryDirectory(prefix="airlock-example-") as scratch:
        policy = Path(scratch) / "task.yaml"
        policy.write_text(policy_yaml(args.llm_upstream, args.git_host))
        sandbox = airlock.Sandbox(
            args.name,
            policy=policy,
            backend=args.backend,
            image=args.image,
            resolve=args.resolve,
            upstream_ca=args.upstream_ca,
        )
        await sandbox.ensure_running()
        try:
            stream = sandbox.exec_stream(
                ["python3", "-"],
                env={"LLM_BASE_URL": "http://airlock.internal/llm/"},
                stdin=WORKER,
                timeout=args.timeout,
            )
            async for line in stream:
                try:
                    event = json.loads(line)
                except ValueError:
                    print(f"worker said: {line}")
                    continue
                print(f"[{args.name}] {event['event']}: {json.dumps(event)}", flush=True)
            if stream.exit_code != 0:
                print(f"worker failed with status {stream.exit_code}:", *stream.stderr_lines, sep="\n", file=sys.stderr)
            return stream.exit_code or 0
        finally:
            await sandbox.teardown()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--name", default=f"task-{os.getpid()}")
    parser.add_argument("--llm-upstream", default="https://api.openai.com/v1/", help="the route's upstream (https, ends in /)")
    parser.add_argument("--git-host", default="github.com")
    parser.add_argument("--backend", choices=["local", "docker"], default="local")
    parser.add_argument("--image", help="the container image (docker backend)")
    parser.add_argument("--resolve", action="append", default=[], metavar="HOST:ADDR")
    parser.add_argument("--upstream-ca", action="append", default=[], metavar="FILE")
    parser.add_argument("--timeout", type=float, default=300.0)
    args = parser.parse_args()
    for name in ("LLM_API_KEY", "GIT_TOKEN"):
        if not os.environ.get(name):
            parser.error(f"set {name} (the real value; only airlock's daemon reads it)")
    try:
        return asyncio.run(orchestrate(args))
    except airlock.AirlockError as error:
        print(f"orchestrator: {error}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
