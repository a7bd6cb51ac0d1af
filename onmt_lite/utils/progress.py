"""Progress of long work: a self-overwriting bar on a terminal, periodic log lines otherwise.

    with Progress(len(lines), "lines", "translate") as progress:
        for batch in batches:
            ...
            progress.update(len(batch))

On a terminal (``stream.isatty()``) one line is redrawn with ``\\r`` at most every ``every_seconds``
(default 0.1 s): ``translate [######------]  1200/2000 lines  60%  350.2 lines/s  2 s left``.
Elsewhere (a file, a pipe) a line goes through the ``onmt_lite`` logger every ``every_seconds``
(default 10 s): ``translate: 1200/2000 lines (60%), 350.2 lines/s, 2 s left``. ``close()`` erases
the bar and logs the final line (``translate: 2000/2000 lines (100%), 350.2 lines/s, done in 6 s``)
in both cases; leaving the ``with`` block on an exception only erases the bar. An unknown ``total``
(None) drops the percentage, the bar and the time left. ``stream`` (default ``sys.stderr`` at the
time of the call) is only written on a terminal.
"""

import sys
import time

from onmt_lite.utils.logging import logger

BAR_WIDTH = 20
CHUNK = 1 << 20  # bytes read at a time when counting lines


def duration(seconds):
    """``'7 s'``, ``'3:05'`` (minutes) or ``'1:02:05'`` (hours)."""
    seconds = int(round(seconds))
    if seconds < 60:
        return f"{seconds} s"
    minutes, seconds = divmod(seconds, 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{seconds:02d}" if hours else f"{minutes}:{seconds:02d}"


def count_lines(path):
    """Lines of a file, counted in binary chunks (a last line without ``\\n`` counts); None if the
    file cannot be read (its reader reports the error)."""
    count = 0
    last = b"\n"
    try:
        with open(path, "rb") as f:
            for chunk in iter(lambda: f.read(CHUNK), b""):
                count = count + chunk.count(b"\n")
                last = chunk[-1:]
    except OSError:
        return None
    return count + (last != b"\n")


class Progress:
    """Counts ``unit``s done out of ``total`` (None: unknown); ``clock`` is injectable for tests."""

    def __init__(self, total, unit, desc, stream=None, every_seconds=None, clock=time.monotonic):
        self.total = total
        self.unit = unit
        self.desc = desc
        self.clock = clock
        self.stream = sys.stderr if stream is None else stream
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.every = every_seconds if every_seconds is not None else (0.1 if self.tty else 10.0)
        self.count = 0
        self.width = 0
        self.closed = False
        self.start = self.drawn = clock()

    def update(self, n=1):
        """``n`` more units done; redraw (terminal) or log when ``every_seconds`` have passed."""
        self.count += n
        now = self.clock()
        if now - self.drawn >= self.every:
            self.drawn = now
            if self.tty:
                self._draw(self.bar(now))
            else:
                logger.info(self.line(now))

    def close(self):
        """Erase the bar and log the final line (once)."""
        if not self.closed:
            self.clear()
            self.closed = True
            logger.info(self.line(self.clock(), final=True))

    def clear(self):
        """Erase the bar (a terminal), e.g. before an error message."""
        if self.width:
            self.stream.write("\r" + " " * self.width + "\r")
            self.stream.flush()
            self.width = 0

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        """Leaving the block: ``close()``, or only ``clear()`` on an exception."""
        if exc_type is None:
            self.close()
        else:
            self.clear()

    def _draw(self, bar):
        self.stream.write("\r" + bar.ljust(self.width))
        self.stream.flush()
        self.width = len(bar)

    def _numbers(self, now):
        """``(count text, rate text, seconds left or None)``."""
        rate = self.count / max(now - self.start, 1e-9)
        counted = f"{self.count}/{self.total}" if self.total is not None else f"{self.count}"
        left = (self.total - self.count) / rate if self.total is not None and rate > 0 else None
        return f"{counted} {self.unit}", f"{rate:.1f} {self.unit}/s", left

    def _percent(self):
        return 100 if not self.total else min(100, int(100 * self.count / self.total))

    def line(self, now, final=False):
        """The log line: ``desc: count/total unit (pct%), rate unit/s, time left``."""
        counted, rate, left = self._numbers(now)
        parts = [f"{counted} ({self._percent()}%)" if self.total is not None else counted, rate]
        if final:
            parts.append(f"done in {duration(now - self.start)}")
        elif left is not None:
            parts.append(f"{duration(left)} left")
        return f"{self.desc}: " + ", ".join(parts)

    def bar(self, now):
        """The terminal line: ``desc [###---]  count/total unit  pct%  rate unit/s  time left``."""
        counted, rate, left = self._numbers(now)
        if self.total is None:
            return f"{self.desc}  {counted}  {rate}"
        filled = BAR_WIDTH * self._percent() // 100
        bar = "#" * filled + "-" * (BAR_WIDTH - filled)
        eta = f"  {duration(left)} left" if left is not None else ""
        return f"{self.desc} [{bar}]  {counted}  {self._percent()}%  {rate}{eta}"
