"""The status page in a real browser, against a real service on the real broker.

A keyed, event-time windowed service (``fast_and_slow``: two source partitions, a key_by,
tumbling windows) serves its endpoint on a free port. Once it has processed every record,
headless chromium shows at ``/`` the service, its partitions with lag 0 and their
watermarks, the member's counters, and a throughput chart; the texts on the page are those
``/status`` gives. A screenshot of the page is kept in ``test-artifacts/status-page.png``.
"""

from __future__ import annotations

import json
import re
import shutil
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from selenium import webdriver
from selenium.common.exceptions import TimeoutException
from selenium.webdriver.support.ui import WebDriverWait

from framework.kafka.admin import TopicSpec, admin_client, ensure_topics
from tests.integration.harness import (
    ROOT,
    ServiceProcess,
    committed_offsets,
    end_offsets,
    get_json,
    produce_to_partitions,
    service_env,
    wait_until,
)

pytestmark = pytest.mark.integration

TARGET = "tests.integration.pipelines:fast_and_slow"
PARTITIONS = 2
PER_PARTITION = 300
SCREENSHOT = ROOT / "test-artifacts" / "status-page.png"
DASH = "\u2014"

# What the page shows, read in one script so no row is caught half replaced.
PAGE_SCRIPT = """
const text = id => document.getElementById(id).textContent;
const rows = Array.from(document.querySelectorAll("#members-table tbody tr")).map(tr => {
  const cells = {};
  tr.querySelectorAll("td[data-col]").forEach(td => { cells[td.dataset.col] = td.textContent; });
  const who = tr.querySelector("td[data-col=instance] .instance");
  if (who) cells.instance = who.textContent;
  return {instance: tr.dataset.instance, partition: tr.dataset.partition, cells: cells};
});
const lines = id => document.querySelectorAll("#" + id + " polyline, #" + id + " path").length;
return {service: text("service"), members: text("member-count"), health: text("health"),
        updated: text("updated"), error_hidden: document.getElementById("error").hidden,
        rows: rows, lines: {rate: lines("chart-rate"), lag: lines("chart-lag"),
                            watermark: lines("chart-watermark")}};
"""


# -- the page's formatting of the values that stay put once the service is idle ------------

def _int(n: int) -> str:
    return f"{n:,}"


def _iso(ms: int | None) -> str:
    if ms is None:
        return DASH
    t = datetime(1970, 1, 1, tzinfo=UTC) + timedelta(milliseconds=ms)
    return t.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _expected_rows(status: dict[str, Any]) -> dict[tuple[str, str], dict[str, str]]:
    """Per (instance, partition): the texts of the cells whose values do not move while the
    service is idle (rates, ages and delays do)."""
    rows: dict[tuple[str, str], dict[str, str]] = {}
    for m in status["members"]:
        for i, p in enumerate(sorted(m["partitions"], key=lambda p: p["partition"])):
            row = {"partition": str(p["partition"]), "state": p["state"], "lag": _int(p["lag"]),
                   "watermark": _iso(p["watermark_ms"]), "restore": DASH}
            if i == 0:
                row |= {"instance": m["instance"], "records": _int(m["records_processed"]),
                        "dead-letters": _int(m["counters"]["dead_letters"])}
            rows[(m["instance"], str(p["partition"]))] = row
    return rows


def _shown_rows(page: dict[str, Any]) -> dict[tuple[str, str], dict[str, str]]:
    return {(r["instance"], r["partition"]): r["cells"] for r in page["rows"]}


# -- the service and the browser -----------------------------------------------------------

def _get_json(url: str) -> Any:
    code, body = get_json(url)
    assert code == 200, (url, code, body)
    return body


@pytest.fixture
def browser() -> Iterator[webdriver.Chrome]:
    chromium, chromedriver = shutil.which("chromium"), shutil.which("chromedriver")
    if chromium is None or chromedriver is None:
        pytest.fail("the status page test needs Debian's chromium and chromium-driver packages "
                    "(scripts/test installs them)")
    options = webdriver.ChromeOptions()
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage",
                "--window-size=1400,900"):
        options.add_argument(arg)
    options.binary_location = chromium
    # the driver named explicitly: Selenium Manager never looks for (or downloads) one
    driver = webdriver.Chrome(options=options,
                              service=webdriver.ChromeService(executable_path=chromedriver))
    try:
        yield driver
    finally:
        driver.quit()


def test_the_status_page_shows_what_status_says_in_a_real_browser(
        kafka_bootstrap: str, unique: str, tmp_path: Path, services: list[ServiceProcess],
        browser: webdriver.Chrome) -> None:
    topic = f"fs-in-{unique}"
    ensure_topics(admin_client({"bootstrap.servers": kafka_bootstrap}), [TopicSpec(topic, PARTITIONS)])
    env = {**service_env(kafka_bootstrap, unique),
           "FW_OBSERVE__PORT": "0", "FW_OBSERVE__INTERVAL_MS": "200"}
    svc = ServiceProcess(TARGET, tmp_path, "0", env)
    services.append(svc.start())
    url = svc.endpoint()

    # readings of the last minute in event time, on both partitions, groups across them
    t0 = int(time.time() * 1000) - 60_000
    produce_to_partitions(kafka_bootstrap, topic, [
        (p, f"s{p}".encode(),
         json.dumps({"sensor": f"s{p}", "group": f"g{i % 3}", "ts": t0 + i * 100, "v": i}).encode())
        for i in range(PER_PARTITION) for p in range(PARTITIONS)])

    def processed() -> bool:
        if committed_offsets(kafka_bootstrap, f"fs-{unique}", topic) != end_offsets(kafka_bootstrap, topic):
            return False
        status = _get_json(f"{url}/status")
        parts = [p for m in status["members"] for p in m["partitions"]]
        return (sorted(p["partition"] for p in parts) == list(range(PARTITIONS))
                and all(p["lag"] == 0 and p["state"] == "running" and p["watermark_ms"] is not None
                        for p in parts)
                and all(m["healthy"] and m["ready"] and m["lag"] == 0 for m in status["members"]))

    wait_until(processed, 120, "every record processed, as /status tells",
               lambda: svc.log_text()[-3000:])

    browser.get(f"{url}/")
    seen: dict[str, Any] = {}

    def page_agrees(driver: webdriver.Chrome) -> bool:
        page = driver.execute_script(PAGE_SCRIPT)
        status = _get_json(f"{url}/status")
        seen.update(page=page, status=status)
        shown = _shown_rows(page)
        expected = _expected_rows(status)
        return (page["service"] == status["service"] and shown.keys() == expected.keys()
                and all(shown[k].get(col) == text for k, want in expected.items()
                        for col, text in want.items())
                and all(n >= 1 for n in page["lines"].values()))

    try:
        WebDriverWait(browser, 60).until(page_agrees)
    except TimeoutException:
        pytest.fail(f"the page never showed what /status says:\n{json.dumps(seen, indent=1)}")

    page, status = seen["page"], seen["status"]
    (member,) = status["members"]
    assert page["service"] == status["service"] == f"fs-{unique}"
    assert page["members"] == "1 member"
    assert page["health"] == "ready"
    assert page["error_hidden"] is True
    assert page["updated"].startswith("updated ")
    shown = _shown_rows(page)
    assert sorted(shown) == [("0", str(p)) for p in range(PARTITIONS)]
    assert [shown[("0", str(p))]["lag"] for p in range(PARTITIONS)] == ["0"] * PARTITIONS
    assert all(row["state"] == "running" for row in shown.values())
    first = shown[("0", "0")]
    assert first["instance"] == member["instance"] == "0"
    assert first["records"] == _int(member["records_processed"]) and member["records_processed"] > 0
    assert first["dead-letters"] == "0"
    # the values that move while the page and the test read them: their form, not their value
    assert re.fullmatch(r"[\d,]+\.\d/s", first["rate"]), first["rate"]
    duration = r"\d+ ms|[\d.]+ s|\d+ min \d+ s|\d+ h \d+ min|[\d,]+ d \d+ h"
    for col in ("checkpoint-age", "checkpoint-duration"):
        assert re.fullmatch(duration, first[col]), (col, first[col])
    for row in shown.values():
        assert re.fullmatch(duration, row["watermark-delay"]), row["watermark-delay"]

    SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
    SCREENSHOT.unlink(missing_ok=True)
    assert browser.save_screenshot(str(SCREENSHOT))
    assert SCREENSHOT.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert SCREENSHOT.stat().st_size > 0
    svc.stop()
