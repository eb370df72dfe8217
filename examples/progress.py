"""The main jobs' training progress: tqdm's bar on a terminal; written to a
file or a pipe, a line at each eighth of the run instead of a bar's
carriage-return updates (thousands of them in a log)."""
import sys


class Progress:
    def __init__(self, total, desc, unit="step", lines=8, done=0):
        """`done`: the steps done already (a resumed run)."""
        self.total, self.desc, self.done = total, desc, done
        self.every = max(1, total // lines)
        self.bar = None
        if sys.stdout.isatty():
            from tqdm import tqdm
            self.bar = tqdm(total=total, desc=desc, unit=unit, dynamic_ncols=True, file=sys.stdout, initial=done)

    def update(self, **values):
        """One step done; `values` (name: text) shown with it."""
        self.done += 1
        if self.bar is not None:
            self.bar.set_postfix(**values)
            self.bar.update(1)
        elif self.done % self.every == 0 or self.done == self.total:
            shown = "  ".join(f"{k} {v}" for k, v in values.items())
            print(f"{self.desc}: step {self.done}/{self.total}  {shown}", flush=True)

    def close(self):
        if self.bar is not None:
            self.bar.close()
