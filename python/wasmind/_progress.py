"""A small progress bar on stderr (no tqdm dependency): `with Progress(total, 'Encoding')`."""

import sys
import time


class Progress:
    def __init__(self, total, desc='', enabled=True, stream=None, width=30):
        self.total, self.desc, self.enabled = total, desc, enabled
        self.stream = stream or sys.stderr
        self.width, self.done, self.start = width, 0, time.monotonic()

    def __enter__(self):
        self._draw()
        return self

    def update(self, n):
        self.done += n
        self._draw()

    def _draw(self):
        if not self.enabled:
            return
        frac = self.done / self.total if self.total else 1.0
        fill = int(frac * self.width)
        rate = self.done / max(1e-9, time.monotonic() - self.start)
        self.stream.write(f'\r{self.desc}: {frac * 100:3.0f}%|{"█" * fill}{" " * (self.width - fill)}'
                          f'| {self.done}/{self.total} [{rate:.0f}/s]')
        self.stream.flush()

    def __exit__(self, *exc):
        if self.enabled:
            self.stream.write('\n')
            self.stream.flush()
