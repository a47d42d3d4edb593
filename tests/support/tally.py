"""The pass/fail tally of the test scripts that are not pytest (each is one ctest test whose exit
code is the verdict): checks counted from any thread, a failure printed at once with its detail,
the summary line and the exit code at the end."""

import sys
import threading


class Tally:
    def __init__(self, echo_passes=""):
        """echo_passes: a prefix ("ok  ") to print every passing check with, or "" for silence."""
        self.passed = 0
        self.failures = []
        self._echo = echo_passes
        self._lock = threading.Lock()

    def check(self, name, ok, detail=""):
        with self._lock:
            if ok:
                self.passed += 1
                if self._echo:
                    print(f"{self._echo}{name}", flush=True)
            else:
                self.failures.append(name)
                print(f"FAIL {name}: {detail}", flush=True)

    @property
    def failed(self):
        return len(self.failures)

    def finish(self):
        """Prints "N passed, M failed" and exits 1 if anything failed."""
        print(f"{self.passed} passed, {self.failed} failed", flush=True)
        sys.exit(1 if self.failures else 0)
