#!/usr/bin/env python3
"""make docs: the example outputs of README.md and attach/cli/README.md,
regenerated from real runs, so that none can go stale.

A block this script owns is a fenced block right after a line
`<!-- example NAME -->`; NAME is one of the RECIPES below, which starts the
targets it needs (the repository's fixtures, Debian's redis-server), runs
the commands and puts each, after "$ ", with what it printed, into the block.
Every memattach command shown is run as shown (PATH starts with build/, the
working directory is a fresh temporary one, MA_TEXT_WIDTH=100).

    python3 tests/make_docs.py           rewrite the blocks (make docs)
    python3 tests/make_docs.py --check   rewrite nothing; PASS/FAIL lines for
                                         tests/cli/docs_examples.sh

--check fails a block that shows a memattach command but has no marker (it
was written by hand, and nothing would make it again), a marker that names
no recipe, and a recipe no block uses.  The outputs themselves vary from run
to run (pids, times, sampling); the offline commands' exact outputs are
tests/cli/golden.sh's.
"""
import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIX = os.path.join(ROOT, "build", "fixtures")
DOCS = ["README.md", "attach/cli/README.md"]
PROF = "prof:true,prof_active:true,prof_final:false"
MARK = re.compile(r"^<!-- example ([a-z0-9_]+) -->$")


class Fixture:
    """A fixture with the control protocol (fixtures/fixlib.h): commands on a
    FIFO, answers on stdout."""

    def __init__(self, tmp, name, *args, env=None):
        self.dir = tempfile.mkdtemp(prefix=name + ".", dir=tmp)
        fifo = os.path.join(self.dir, "in")
        os.mkfifo(fifo)
        self.out_path = os.path.join(self.dir, "out")
        e = dict(os.environ, **(env or {}))
        rd = os.open(fifo, os.O_RDWR)  # opened both ways: never blocks
        with open(self.out_path, "w") as out:
            self.proc = subprocess.Popen([os.path.join(FIX, name), *args], stdin=rd, stdout=out,
                                         stderr=open(os.path.join(self.dir, "err"), "w"), env=e)
        self.ctl = open(fifo, "w")
        os.close(rd)
        self.pid = self.proc.pid
        self.wait_line(lambda l: l.startswith("READY"), 0, 10)

    def lines(self):
        with open(self.out_path) as f:
            return f.read().splitlines()

    def wait_line(self, want, after, seconds):
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            new = [l for l in self.lines()[after:] if want(l)]
            if new:
                return new[0]
            if self.proc.poll() is not None:
                break
            time.sleep(0.02)
        raise RuntimeError("fixture %d: no answer (%s)" % (self.pid, open(os.path.join(self.dir, "err")).read()[:300]))

    def cmd(self, line, want="", seconds=60):
        """Send LINE; wait for the answer (the first new line starting with WANT)."""
        n = len(self.lines())
        self.ctl.write(line + "\n")
        self.ctl.flush()
        return self.wait_line(lambda l: l.startswith(want), n, seconds)

    def close(self):
        with contextlib.suppress(OSError, ValueError):
            self.ctl.write("quit\n")
            self.ctl.close()
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class Redis:
    """Debian's redis-server after 200,000 SETs of 200 bytes, every other
    key then deleted: half-empty slabs to show."""

    def __init__(self, tmp):
        self.port = free_port()
        self.proc = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--daemonize", "no", "--dir", tmp],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.pid = self.proc.pid
        for _ in range(100):
            if subprocess.run(["redis-cli", "-p", str(self.port), "ping"],
                              capture_output=True).stdout.strip() == b"PONG":
                break
            time.sleep(0.05)
        value = "x" * 200
        resp = []
        for i in range(200000):
            resp.append("*3\r\n$3\r\nSET\r\n$%d\r\nkey:%d\r\n$200\r\n%s\r\n" % (len("key:%d" % i), i, value))
        for i in range(0, 200000, 2):
            resp.append("*2\r\n$3\r\nDEL\r\n$%d\r\nkey:%d\r\n" % (len("key:%d" % i), i))
        subprocess.run(["redis-cli", "-p", str(self.port), "--pipe"], input="".join(resp).encode(),
                       capture_output=True, check=True)

    def close(self):
        self.proc.terminate()
        self.proc.wait()


class Runner:
    """Runs shell command lines in the work directory and keeps them, after
    "$ ", with what they printed."""

    def __init__(self, work):
        self.work = work
        self.env = dict(os.environ, PATH=os.path.join(ROOT, "build") + ":" + os.environ["PATH"],
                        MA_TEXT_WIDTH="100", LC_ALL="C.UTF-8")
        self.env.pop("COLUMNS", None)
        self.text = []

    def run(self, line, head=None, show=True):
        """Run LINE; with HEAD, keep its first HEAD lines and a "..."."""
        p = subprocess.run(["bash", "-c", line + " 2>&1"], cwd=self.work, env=self.env,
                           stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, timeout=120)
        out = p.stdout.decode(errors="replace").rstrip("\n").splitlines()
        if head is not None and len(out) > head:
            out = out[:head] + ["..."]
        if show:
            self.text.append("$ " + line)
            self.text.extend(out)
        return out

    def start(self, line):
        """Start LINE in the background (shown with its "&"); its output is
        kept in a file and shown by finish()."""
        path = os.path.join(self.work, ".bg%d" % len(self.text))
        p = subprocess.Popen(["bash", "-c", "exec " + line + " >%s 2>&1" % path], cwd=self.work,
                             env=self.env, stdin=subprocess.DEVNULL)
        self.text.append("$ " + line + " &")
        return p, path

    def finish(self, p, path, at=None):
        """Wait for a background run and show its output (after the line
        AT of the text, or at the end)."""
        p.wait(120)
        out = open(path).read().rstrip("\n").splitlines()
        if at is None:
            self.text.extend(out)
        else:
            self.text[at:at] = out


# --- the recipes: NAME -> function(runner, targets) ---

def wait_for(pred, seconds=10):
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(0.05)
    return False


def r_stats_redis(r, t):
    r.run("memattach stats %d" % t.redis().pid)


def r_stats_strict(r, t):
    r.run("memattach stats %d --strict" % t.redis().pid)


def r_ps(r, t):
    t.daemon(), t.redis()
    r.run("memattach ps")


def r_threads(r, t):
    r.run("memattach threads %d" % t.daemon().pid, head=9)


def r_bins_top(r, t):
    r.run("memattach bins %d --top 4" % t.frag().pid)


def r_bins_flush(r, t):
    pid = t.frag().pid
    r.run("memattach bins %d --json | jq -c '.tcache_bytes, (.bins[] | select(.size==448) | .waste)'" % pid)
    r.run("memattach bins %d --flush-tcache --json | jq -c '.tcache_flush, .tcache_bytes, "
          "(.bins[] | select(.size==448) | .waste)'" % pid)


def r_stats_dump(r, t):
    r.run("memattach stats-dump %d -o stats.json" % t.daemon().pid)
    r.run("memattach bins --stats stats.json --top 3", head=8)


def r_purge(r, t):
    r.run("memattach purge %d" % t.fixture("bigfree", "frag", "-m", "bigfree", "-M", "64").pid)


def r_heap_dump(r, t):
    r.run("memattach heap-dump %d -o app.heap" % t.prof_daemon().pid)
    r.run("memattach heap-dump %d -o x.heap" % t.daemon().pid)


def r_watch(r, t):
    f = t.fixture("peak", "frag", "-m", "peak", "-M", "16", env={"MALLOC_CONF": PROF})
    p, path = r.start("memattach watch %d --interval 50 -o wdir --duration 3s" % f.pid)
    at = len(r.text)
    time.sleep(0.6)
    for mib in (16, 32, 48):
        f.cmd("peak %d" % mib)
        time.sleep(0.3)
    f.cmd("unpeak")
    r.finish(p, path, at)
    r.run("memattach aggregate wdir/peak.heap --top 1")


def r_export(r, t):
    pid, port = t.redis().pid, free_port()
    p, path = r.start("memattach export --listen 127.0.0.1:%d --pid %d" % (port, pid))
    at = len(r.text)
    wait_for(lambda: subprocess.run(["curl", "-sf", "-o", "/dev/null", "127.0.0.1:%d/metrics" % port]).returncode == 0)
    r.run("curl -s 127.0.0.1:%d/metrics | grep -E '^(jemalloc_(allocated|slab_waste)_bytes|"
          "memattach_scrape_borrow)'" % port)
    p.send_signal(signal.SIGTERM)
    r.finish(p, path, at)
    r.run("memattach stats %d --format openmetrics | grep -E '^jemalloc_(allocated|slab_waste)_bytes'" % pid)


def r_snapshot(r, t):
    r.run("memattach snapshot %d -o snapA" % t.prof_daemon().pid)
    r.run("jq -c 'to_entries[] | {(.key): .value}' snapA/manifest.json")


def prof_c_dumps(r):
    r.run("mkdir -p old new && cp %s/prof_c old/app && cp %s/prof_c new/app" % (FIX, FIX), show=False)
    r.run("MALLOC_CONF=%s,lg_prof_sample:19 old/app before.heap >/dev/null" % PROF, show=False)
    r.run("MALLOC_CONF=%s,lg_prof_sample:19 new/app after.heap >/dev/null" % PROF, show=False)


def r_aggregate(r, t):
    prof_c_dumps(r)
    r.run("memattach aggregate before.heap --top 3")


def r_stacks(r, t):
    prof_c_dumps(r)
    r.run("memattach stacks before.heap site_calloc")


def r_diff(r, t):
    prof_c_dumps(r)
    r.run("memattach diff before.heap after.heap")


def r_diff_snapshots(r, t):
    f = t.fixture("peak", "frag", "-m", "peak", "-M", "16", env={"MALLOC_CONF": PROF})
    r.run("memattach snapshot %d -o snapA" % f.pid, show=False)
    f.cmd("peak 16")
    r.run("memattach snapshot %d -o snapB" % f.pid, show=False)
    f.cmd("unpeak")
    r.run("memattach diff snapA snapB --top 3")


def r_frag(r, t):
    f = t.fixture("fragharness", "fragharness")
    r.run("memattach frag start %d --shift 6" % f.pid)
    f.cmd("build", "BUILT", 120)
    r.run("memattach frag report %d --top 5" % f.pid)
    r.run("memattach frag stop %d" % f.pid)


def r_frag_focus(r, t):
    f = t.fixture("fragharness", "fragharness")
    r.run("memattach frag start %d --focus 256" % f.pid)
    f.cmd("build_mixed", "BUILT", 120)
    r.run("memattach frag report %d --top 5" % f.pid)
    r.run("memattach frag stop %d" % f.pid, show=False)


def r_ab(r, t):
    side = os.path.join(ROOT, "fixtures", "ab_redis_side.sh")
    os.symlink(side, os.path.join(r.work, "side.sh"))
    os.mkdir(os.path.join(r.work, "r"))
    prof = "MALLOC_CONF=prof:true,lg_prof_sample:14"
    line = ("memattach ab -a '%s ./side.sh r' -b '%s ./side.sh r --hash-max-listpack-entries 0' "
            "--pid 'cat r/redis.pid' --runs 5 --heap --skip 'zmalloc|zcalloc|zrealloc|ztry'" % (prof, prof))
    out = r.run(line, show=False)
    # the progress lines (stderr, one per sample) left out
    r.text.append("$ " + line)
    r.text.extend(l for l in out if not l.startswith("ab: sample "))


def r_profile(r, t):
    """Debian's redis-server (no prof): the agent's profile of 100,000 SETs
    made after profile start."""
    red = t.redis()
    r.run("memattach profile start %d" % red.pid)
    value = "y" * 300
    resp = "".join("*3\r\n$3\r\nSET\r\n$%d\r\nnew:%d\r\n$300\r\n%s\r\n" % (len("new:%d" % i), i, value)
                   for i in range(100000))
    subprocess.run(["redis-cli", "-p", str(red.port), "--pipe"], input=resp.encode(),
                   capture_output=True, check=True)
    r.run("memattach heap-dump %d -o redis.heap" % red.pid)
    r.run("memattach aggregate redis.heap --top 4 --skip 'zmalloc|zcalloc|zrealloc|ztry'", head=40)
    r.run("memattach profile stop %d" % red.pid)


RECIPES = {
    "ab": r_ab, "profile": r_profile,
    "stats_redis": r_stats_redis, "stats_strict": r_stats_strict, "ps": r_ps,
    "threads": r_threads, "bins_top": r_bins_top, "bins_flush": r_bins_flush,
    "stats_dump": r_stats_dump, "purge": r_purge, "heap_dump": r_heap_dump,
    "watch": r_watch, "export": r_export, "snapshot": r_snapshot,
    "aggregate": r_aggregate, "stacks": r_stacks, "diff": r_diff,
    "diff_snapshots": r_diff_snapshots, "frag": r_frag, "frag_focus": r_frag_focus,
}


class Targets:
    """The targets of the recipes, each started on first use and shared."""

    def __init__(self, tmp):
        self.tmp, self.live = tmp, {}

    def fixture(self, key, name, *args, env=None):
        if key not in self.live:
            self.live[key] = Fixture(self.tmp, name, *args, env=env)
            time.sleep(0.5)
        return self.live[key]

    def daemon(self):
        return self.fixture("daemon", "daemon", "-t", "4")

    def prof_daemon(self):
        return self.fixture("prof_daemon", "daemon", "-t", "2", env={"MALLOC_CONF": PROF})

    def frag(self):
        return self.fixture("frag", "frag")

    def redis(self):
        if "redis" not in self.live:
            self.live["redis"] = Redis(self.tmp)
        return self.live["redis"]

    def drop(self, key):
        if key in self.live:
            self.live.pop(key).close()

    def close(self):
        for k in list(self.live):
            self.drop(k)


def blocks(path):
    """(marker name or None, first line, end line, body) of each fenced block."""
    lines = open(os.path.join(ROOT, path)).read().split("\n")
    out, i = [], 0
    while i < len(lines):
        if lines[i].startswith("```"):
            j = i + 1
            while j < len(lines) and not lines[j].startswith("```"):
                j += 1
            m = MARK.match(lines[i - 1]) if i else None
            out.append((m.group(1) if m else None, i, j, lines[i + 1:j]))
            i = j + 1
        else:
            i += 1
    return lines, out


def generate(name, targets):
    with tempfile.TemporaryDirectory(prefix="docs.") as work:
        r = Runner(work)
        RECIPES[name](r, targets)
        # the fixtures that a recipe changes are not shared with the next
        for k in ("peak", "fragharness", "bigfree"):
            targets.drop(k)
        return r.text


def check():
    n_fail, used = 0, set()

    def report(ok, what):
        nonlocal n_fail
        print(("PASS " if ok else "FAIL ") + what)
        n_fail += not ok

    for path in DOCS:
        _, bs = blocks(path)
        for name, first, _, body in bs:
            shown = [l for l in body if l.startswith("$ memattach")]
            where = "%s:%d" % (path, first + 1)
            if name is None:
                if shown:
                    report(False, "%s: a block showing '%s' has no example marker: make docs "
                           "cannot make it again" % (where, shown[0]))
                continue
            used.add(name)
            report(name in RECIPES and shown,
                   "%s: example %s has a recipe in tests/make_docs.py and shows its commands" % (where, name))
    for name in sorted(set(RECIPES) - used):
        report(False, "recipe %s of tests/make_docs.py: no block uses it" % name)
    return n_fail


def rewrite(only):
    with tempfile.TemporaryDirectory(prefix="docs-targets.") as tmp:
        t = Targets(tmp)
        try:
            for path in DOCS:
                lines, bs = blocks(path)
                made = []
                # in the document's order: recipes share targets, and a
                # later one may change what an earlier one shows (a flush)
                for name, first, end, _ in bs:
                    if name is None or (only and name not in only):
                        continue
                    if name not in RECIPES:
                        sys.exit("%s:%d: no recipe named %s" % (path, first + 1, name))
                    text = generate(name, t)
                    if not any(l.startswith("$ memattach") for l in text):
                        sys.exit("%s: example %s: the recipe showed no memattach command" % (path, name))
                    made.append((first, end, text))
                    print("%s: %s (%d lines)" % (path, name, len(text)))
                for first, end, text in reversed(made):  # from the end: line numbers hold
                    lines[first + 1:end] = text
                # written whole at the end: an interrupted run leaves the file as it was
                with open(os.path.join(ROOT, path) + ".tmp", "w") as f:
                    f.write("\n".join(lines))
                os.replace(os.path.join(ROOT, path) + ".tmp", os.path.join(ROOT, path))
        finally:
            t.close()


if __name__ == "__main__":
    if sys.argv[1:2] == ["--check"]:
        sys.exit(1 if check() else 0)
    rewrite(set(sys.argv[1:]))
