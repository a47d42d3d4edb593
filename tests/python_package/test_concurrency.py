"""Python threads embedding at once: every answer right, the GIL released during the work, a model
closed under running calls harmless. Speed under concurrency is measured by bench/python_bench.py,
not asserted here."""
import threading
import time

import numpy as np

import embedrt
from conftest import write_embt


def test_many_threads_get_the_answers_one_thread_gets(gpt2_like):
    path, tok, pos = gpt2_like
    rng = np.random.default_rng(7)
    requests = [(rng.integers(0, tok.shape[0], size=(b, l)), rng.integers(0, 16 - l + 1, size=b))
                for b, l in [(1, 1), (2, 3), (4, 8), (3, 16), (1, 5)] * 4]
    with embedrt.Model(path) as model:
        expected = [tok[ids] + pos[starts[:, None] + np.arange(ids.shape[1])] for ids, starts in requests]
        failures = []

        def worker(seed):
            order = np.random.default_rng(seed).permutation(len(requests))
            out = {}
            for _ in range(25):
                for k in order:
                    ids, starts = requests[k]
                    if k % 2:
                        result = model.embed(ids, starts=starts)
                    else:
                        result = out.setdefault(k, np.empty(ids.shape + (tok.shape[1],), dtype=np.float32))
                        model.embed(ids, starts=starts, out=result)
                    if not np.array_equal(result, expected[k]):
                        failures.append((seed, k))

        threads = [threading.Thread(target=worker, args=(seed,)) for seed in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert failures == []


def test_the_gil_is_released_while_rows_are_gathered(tmp_path):
    """While one thread is inside a long embed() call, another runs Python code. With the GIL held
    for the call, the other thread could run only before the call starts or after it ends (it cannot
    interrupt C++ code to take the GIL), never in the middle 60% of a call of 20 ms or more."""
    rng = np.random.default_rng(3)
    tok = rng.standard_normal((4096, 1024)).astype(np.float32)
    path = tmp_path / "wide.embt"
    write_embt(str(path), [("embed_tokens", "token", "f32", tok)], {"model.family": "llama"})
    ids = rng.integers(0, 4096, size=(96, 1024))
    out = np.empty((96, 1024, 1024), dtype=np.float32)  # 384 MiB on one thread: tens of milliseconds
    with embedrt.Model(path, residency="populate") as model:
        for attempt in range(3):
            stop = threading.Event()
            samples = []

            def count():
                while not stop.is_set():
                    samples.append(time.perf_counter())

            counter = threading.Thread(target=count)
            counter.start()
            time.sleep(0.01)
            t0 = time.perf_counter()
            model.embed(ids, out=out, threads=1)
            t1 = time.perf_counter()
            stop.set()
            counter.join()
            middle = [s for s in samples if t0 + 0.2 * (t1 - t0) < s < t0 + 0.8 * (t1 - t0)]
            if t1 - t0 >= 0.02 and middle:
                break
        assert t1 - t0 >= 0.02, f"the call took {t1 - t0:.3f} s: too short to tell"
        assert middle, f"no Python code ran during the middle of a {t1 - t0:.3f} s call: is the GIL held?"
        np.testing.assert_array_equal(out[5, :7], tok[ids[5, :7]])


def test_close_while_other_threads_embed(gpt2_like):
    """Calls already running finish on the mapping they hold; later ones raise 'closed'."""
    path, tok, pos = gpt2_like
    ids = np.arange(32).reshape(2, 16) % tok.shape[0]
    expected = tok[ids] + pos[np.arange(16)]
    for _ in range(5):
        model = embedrt.Model(path)
        outcomes = []

        def worker():
            for _ in range(500):
                try:
                    result = model.embed(ids)
                except embedrt.InvalidArgumentError as error:
                    outcomes.append(str(error))
                    return
                if not np.array_equal(result, expected):
                    outcomes.append("wrong answer")
                    return
            outcomes.append("finished")

        threads = [threading.Thread(target=worker) for _ in range(4)]
        for t in threads:
            t.start()
        time.sleep(0.002)
        model.close()
        for t in threads:
            t.join()
        assert set(outcomes) <= {"finished", "the model is closed"}, outcomes


def test_first_calls_from_many_threads_at_once(gpt2_like):
    """The first calls of a process import numpy and ml_dtypes, which runs Python code and can hand
    the GIL to another thread: no thread may then wait for the importing one while holding the GIL
    (a fresh interpreter, so the imports really happen during the calls)."""
    import subprocess
    import sys
    script = f"""
import threading, embedrt
model = embedrt.Model({str(gpt2_like[0])!r})
results = []
def first_call():
    results.append(model.embed([[1, 2, 3]], dtype="bf16").shape)
threads = [threading.Thread(target=first_call) for _ in range(16)]
for t in threads: t.start()
for t in threads: t.join()
assert results == [(1, 3, 24)] * 16, results
print("ok")
"""
    for _ in range(3):
        done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
        assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr
