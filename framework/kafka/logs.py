"""librdkafka's own log lines, through Python logging.

Every client the framework makes passes ``logger=CLIENT_LOG``, so nothing a client says goes
straight to the terminal: its lines reach the handlers ``fw`` configured (text or JSON lines,
at ``--log-level``). confluent-kafka maps librdkafka's syslog levels to logging's: 0-2
CRITICAL, 3 ERROR, 4 WARNING, 5-6 INFO, 7 DEBUG.

A condition that lasts makes librdkafka say the same thing again and again (a broker down:
a failed connect every second or so). ``Repeats`` lets the first line through, drops the
same line (digits aside: counts, durations, timestamps) while it keeps coming, and lets it
through again once a minute with how many were dropped; a line that stops coming is
forgotten, so the condition's return is logged again.

``Transport`` demotes to DEBUG what a client says of its connections (librdkafka's ``FAIL``
lines: a broker disconnected or refusing) and of the retries while a restarted broker loads
(a coordinator loading, a producer id not granted yet, a leader not known yet), and a session
the group lost (``SESSTMOUT``: the member says "partitions lost" itself): the service reports an unreachable cluster
in its own words, once (``framework.runtime.outage``). While ``quiet`` is set (an outage is
being waited out) every client line below CRITICAL is demoted. A fatal error's own line
(``FATAL``) is demoted too: the service stops with a line of its own that names the cause;
and while ``fatal_explained`` is set (the service knows what the fatal error to come means:
``framework.runtime.slow``) every client line is.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable

CLIENT_LOG = logging.getLogger("framework.kafka.client")
# A probe's clients log here, to nobody: while probing, "connection refused" is an answer the
# caller reports in its own words, not news.
QUIET_LOG = logging.getLogger("framework.kafka.probe")
QUIET_LOG.addHandler(logging.NullHandler())
QUIET_LOG.propagate = False
_DIGITS = re.compile(r"\d+")


class Repeats(logging.Filter):
    """Drop a log line that repeats one let through less than ``every_s`` ago."""

    def __init__(self, every_s: float = 60.0, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self.every_s = every_s
        self._now = clock
        self._seen: dict[tuple[int, str], list[float]] = {}  # shape -> [let through at, last seen, dropped]

    def filter(self, record: logging.LogRecord) -> bool:
        now = self._now()
        key = (record.levelno, _DIGITS.sub("#", record.getMessage()))
        seen = self._seen.get(key)
        if seen is not None and now - seen[1] < self.every_s and now - seen[0] < self.every_s:
            seen[1], seen[2] = now, seen[2] + 1
            return False
        if seen is not None and seen[2] and now - seen[1] < self.every_s:  # still coming: say how often
            record.msg, record.args = f"{record.getMessage()} (again {int(seen[2])} times since)", ()
        if len(self._seen) > 1000:
            self._seen.clear()
        self._seen[key] = [now, now, 0]
        return True


# SESSTMOUT: a session the group lost; the member says so itself ("partitions lost ...")
_TRANSIENT = re.compile(r"^(FAIL |FATAL |GETPID |SESSTMOUT |.*(Coordinator load in progress|not found in cache|brokers "
                        r"are down))")


class Transport(logging.Filter):
    """Demote connection failures and a restarted broker's transient answers to DEBUG."""

    quiet = False  # an outage is being waited out: every client line but CRITICAL is demoted
    # the service knows the cause of the fatal error to come and will stop with it in its own
    # words (a record that outlived its transaction): the clients' CRITICAL lines are demoted too
    fatal_explained = False

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if not Transport.fatal_explained:
            if record.levelno >= logging.CRITICAL and not message.startswith("FATAL "):
                return True
            if not (Transport.quiet or _TRANSIENT.match(message)):
                return True
        record.levelno, record.levelname = logging.DEBUG, "DEBUG"
        return CLIENT_LOG.isEnabledFor(logging.DEBUG)


CLIENT_LOG.addFilter(Transport())
CLIENT_LOG.addFilter(Repeats())
