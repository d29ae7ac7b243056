# Toolhost's Python driver: one persistent namespace, one JSON request per line on standard
# input, one JSON reply per line on the original standard output. What the code prints is
# captured per run (head and tail, the whole in a spill file); the process's own descriptors 1
# and 2 go to the session's error log, so nothing the code or its children write can break the
# protocol.
import ast
import collections
import io
import json
import linecache
import os
import sys
import traceback

SPILL_CAP = 64 * 1024 * 1024
REPR_CAP = 20000


def limit_memory():
    try:
        limit = int(sys.argv[1]) if len(sys.argv) > 1 else 0
    except ValueError:
        limit = 0
    if limit > 0:
        import resource
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


class Capture(io.TextIOBase):
    """Keeps the head and tail of what is written, the whole up to a cap in a spill file."""

    def __init__(self, budget, spill_path):
        self.half = max(budget // 2, 256)
        self.head = []
        self.head_len = 0
        self.tail = collections.deque()
        self.tail_len = 0
        self.total = 0
        self.spill_path = spill_path
        self.spill = None
        self.spilled = 0

    def writable(self):
        return True

    def isatty(self):
        return False

    def write(self, text):
        if not isinstance(text, str):
            raise TypeError("write() argument must be str, not %s" % type(text).__name__)
        n = len(text)
        self.total += n
        if self.spill_path and self.spilled < SPILL_CAP:
            try:
                if self.spill is None:
                    self.spill = open(self.spill_path, "w", encoding="utf-8", errors="replace")
                part = text[: SPILL_CAP - self.spilled]
                self.spill.write(part)
                self.spilled += len(part)
            except OSError:
                self.spill_path = None
        if self.head_len < self.half:
            part = text[: self.half - self.head_len]
            self.head.append(part)
            self.head_len += len(part)
            text = text[len(part):]
        if text:
            self.tail.append(text)
            self.tail_len += len(text)
            while self.tail and self.tail_len - len(self.tail[0]) >= self.half:
                self.tail_len -= len(self.tail.popleft())
        return n

    def flush(self):
        if self.spill is not None:
            self.spill.flush()

    def result(self):
        head = "".join(self.head)
        tail = "".join(self.tail)
        if len(tail) > self.half:
            tail = tail[-self.half:]
        dropped = self.total - len(head) - len(tail)
        if self.spill is not None:
            self.spill.close()
        spill = self.spill_path if dropped > 0 and self.spill is not None else None
        return head, tail, dropped, spill


def format_exception(error):
    tb = error.__traceback__
    # Only the user's own frames: the driver's are noise.
    while tb is not None and not tb.tb_frame.f_code.co_filename.startswith("<cell-"):
        tb = tb.tb_next
    text = "".join(traceback.format_exception(type(error), error, tb))
    if len(text) > 8000:
        text = text[:2000] + "\n[… traceback cut …]\n" + text[-6000:]
    return text.rstrip("\n")


def shown(value):
    try:
        text = repr(value)
    except BaseException as error:
        text = "<repr failed: %s>" % type(error).__name__
    if len(text) > REPR_CAP:
        text = text[: REPR_CAP // 2] + " … [%d characters cut] … " % (len(text) - REPR_CAP) + text[-REPR_CAP // 2:]
    return text


def run(namespace, number, request):
    name = "<cell-%d>" % number
    code = request["code"]
    capture = Capture(int(request.get("budget", 20000)), request.get("spill"))
    saved = sys.stdout, sys.stderr
    sys.stdout = sys.stderr = capture
    value = None
    error = None
    interrupted = False
    try:
        linecache.cache[name] = (len(code), None, code.splitlines(True), name)
        tree = ast.parse(code, name, "exec")
        last = None
        if tree.body and isinstance(tree.body[-1], ast.Expr):
            last = ast.Expression(tree.body.pop().value)
        exec(compile(tree, name, "exec"), namespace)
        if last is not None:
            result = eval(compile(last, name, "eval"), namespace)
            if result is not None:
                namespace["_"] = result
                value = shown(result)
    except KeyboardInterrupt as caught:
        interrupted = True
        error = format_exception(caught)
    except BaseException as caught:
        error = format_exception(caught)
    finally:
        sys.stdout, sys.stderr = saved
    head, tail, dropped, spill = capture.result()
    return {
        "head": head,
        "tail": tail,
        "dropped": dropped,
        "spill": spill,
        "value": value,
        "error": error,
        "interrupted": interrupted,
    }


def main():
    limit_memory()
    requests = os.fdopen(os.dup(0), "rb")
    replies = os.fdopen(os.dup(1), "wb")
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    os.dup2(2, 1)
    sys.stdin = open(os.devnull)
    namespace = {"__name__": "__main__", "__builtins__": __builtins__}
    number = 0
    replies.write(b"\x1eTH{\"ready\": true}\n")
    replies.flush()
    while True:
        try:
            line = requests.readline()
            if not line:
                return
            number += 1
            reply = run(namespace, number, json.loads(line))
            replies.write(b"\x1eTH" + json.dumps(reply).encode() + b"\n")
            replies.flush()
        except KeyboardInterrupt:
            # An interrupt that came between runs: the reply (if any) went out already.
            continue


main()
