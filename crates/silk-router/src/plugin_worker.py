"""Silk's convert worker: runs a router config's project converts written in Python.

The router starts this script as `python3 -c <script> PLUGINS_DIR` and talks to it in JSON
lines: one request per line on the original stdin, one answer per line on the original
stdout. What the converts print goes to stderr (the router logs it) and what they read is
empty, so they cannot break the protocol.

Requests and answers (each answer carries its request's `id`):
  {"id": 7, "op": "load", "step": 3, "class": "ic.ExtractTaskParams", "init": {...}}
      -> {"id": 7, "ok": true} | {"id": 7, "error": "...", "traceback": "..."}
  {"id": 8, "op": "convert", "step": 3, "task": {...}}
      -> {"id": 8, "task": {...}} | {"id": 8, "error": "...", "traceback": "..."}

The worker exits when the router that started it is gone (its parent changes).

The interface a convert class offers (see docs/router.md, "Python converts"):
  - it is instantiated once per convert step with the step's `init` as keyword arguments
    (`ExtractTaskParams(**init)`), or as one dict when its constructor's only argument is
    named `init` or `config` (`ParseNoticeItem(init)`);
  - its `convert(task)` (or `process(task)`, or `__call__(task)`) gets the task as a dict
    and returns the converted dict, or `None` when it changed the dict in place;
  - raising marks the task failed, with the exception's text in the failure record.
A plain function named by `class` is used as the convert itself (it takes no `init`).
"""

import sys

# Not the current folder (the plugins folder): a module there named `json` or `inspect`
# must not replace the worker's own imports. The folder is put first on `sys.path` below.
sys.path[:] = [p for p in sys.path if p not in ("", ".")]

import importlib  # noqa: E402
import inspect  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
import traceback  # noqa: E402


def instantiate(cls, init):
    try:
        params = list(inspect.signature(cls).parameters.values())
    except (TypeError, ValueError):
        params = []
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    if len(params) == 1 and params[0].name in ("init", "config") and params[0].kind in positional:
        return cls(init)
    return cls(**init)


def build(path, init):
    module_name, _, attr = path.rpartition(".")
    if not module_name:
        raise ValueError("`%s` names no module: write `module.Class`" % path)
    module = importlib.import_module(module_name)
    try:
        target = getattr(module, attr)
    except AttributeError:
        raise LookupError(
            "module `%s` (%s) has no `%s`"
            % (module_name, getattr(module, "__file__", "?"), attr)
        ) from None
    if inspect.isclass(target):
        instance = instantiate(target, init)
        for name in ("convert", "process"):
            method = getattr(instance, name, None)
            if callable(method):
                return method
        if callable(instance):
            return instance
        raise TypeError(
            "class `%s` has no `convert(task)`, `process(task)` or `__call__(task)`" % path
        )
    if callable(target):
        if init:
            raise TypeError("`%s` is a function: it takes no `init`" % path)
        return target
    raise TypeError("`%s` is neither a class nor a function" % path)


def watch_parent():
    """Exits when the router is gone (a SIGKILLed router cannot stop its workers)."""
    parent = os.getppid()
    while True:
        time.sleep(1)
        if os.getppid() != parent:
            os._exit(0)


def main():
    threading.Thread(target=watch_parent, daemon=True).start()
    protocol = os.fdopen(os.dup(1), "wb")
    requests = os.fdopen(os.dup(0), "rb")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    # A convert (or a process it starts) that reads its input reads nothing, not requests.
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    sys.stdin = open(os.devnull)
    sys.path.insert(0, os.path.abspath(sys.argv[1]))
    steps = {}

    def answer(message):
        try:
            line = json.dumps(message, ensure_ascii=False, allow_nan=False)
        except (TypeError, ValueError) as e:
            line = json.dumps(
                {"id": message.get("id"), "error": "the converted task is not JSON: %s" % e}
            )
        protocol.write(line.encode("utf-8") + b"\n")
        protocol.flush()

    answer({"ready": True, "python": sys.version.split()[0]})
    for raw in requests:
        request_id = None
        try:
            request = json.loads(raw)
            request_id = request.get("id")
            op = request["op"]
            if op == "load":
                steps[request["step"]] = build(request["class"], request.get("init") or {})
                answer({"id": request_id, "ok": True})
            elif op == "convert":
                task = request["task"]
                result = steps[request["step"]](task)
                if result is None:
                    result = task
                if not isinstance(result, dict):
                    raise TypeError(
                        "the convert returned %s, not a dict (or None)" % type(result).__name__
                    )
                answer({"id": request_id, "task": result})
            else:
                answer({"id": request_id, "error": "unknown op %r" % (op,)})
        # Every failure of a convert is its task's answer; `sys.exit()` in a convert too.
        except (Exception, SystemExit) as e:  # noqa: BLE001
            answer(
                {
                    "id": request_id,
                    "error": "%s: %s" % (type(e).__name__, e),
                    "traceback": traceback.format_exc(limit=8),
                }
            )


main()
