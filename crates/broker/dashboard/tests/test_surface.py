"""The dashboard's views of the client's wider surface, in a real browser against a real broker:
the queue page lists the queue's pending timers (paged by key) and cancels one; the key-value
page browses a namespace by prefix, values shown as text; a read-only token is told the
key-value page needs read-write; the ephemeral page lists ephemeral queues with their gauges."""

import base64
import json
import uuid

from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions as EC
from selenium.webdriver.support.ui import WebDriverWait

from conftest import call, mint, push, row_of, shot, wait_text


def schedule(queue, keys, delay_ms=3_600_000):
    payload = base64.b64encode(json.dumps({"timer": True}).encode()).decode()
    ops = [{"op": "schedule", "queue": queue, "timerKey": k, "payload": payload,
            "delayMs": delay_ms, "txn": f"txn-{k}"} for k in keys]
    status, body = call("POST", "/api/v1/timers", {"operations": ops})
    assert status == 200 and all(r["ok"] for r in body["results"]), body


def timer_keys(browser):
    return browser.execute_script(
        "return [...document.querySelectorAll('#timers tbody tr td:first-child')]"
        ".map(td => td.textContent)")


def test_queue_page_lists_timers_a_page_at_a_time_and_cancels_one(browser, url):
    queue = f"dash-timers-{uuid.uuid4().hex[:8]}"
    push(queue, 1)
    keys = [f"order/{i:03}" for i in range(55)]
    schedule(queue, keys)

    browser.get(f"{url}/#/queue/{queue}")
    wait_text(browser, "#timers", "order/000")
    assert timer_keys(browser) == keys[:50]
    row = row_of(browser, "order/000")
    cells = [c.text for c in row.find_elements(By.TAG_NAME, "td")]
    assert cells[1] == "Default" and cells[3] == "txn-order/000" and cells[5] == "no", cells
    shot(browser, "queue-timers")

    browser.find_element(By.CSS_SELECTOR, "button[data-action=timers-next]").click()
    wait_text(browser, "#timers", "page 2")
    assert timer_keys(browser) == keys[50:]
    assert browser.find_element(By.CSS_SELECTOR, "button[data-action=timers-next]").get_attribute("disabled")

    row_of(browser, "order/054").find_element(By.CSS_SELECTOR, "button[data-action=cancel-timer]").click()
    WebDriverWait(browser, 10).until(EC.alert_is_present())
    browser.switch_to.alert.accept()
    wait_text(browser, "#status", "cancel order/054: cancelled")
    _, peek = call("GET", f"/api/v1/timers/{queue}/order/054")
    assert peek["found"] is False, peek
    _, left = call("GET", f"/api/v1/timers/{queue}?limit=1000")
    assert [t["timerKey"] for t in left["rows"]] == keys[:54]


def test_queue_page_says_when_it_has_no_timers(browser, url):
    queue = f"dash-notimers-{uuid.uuid4().hex[:8]}"
    push(queue, 1)
    browser.get(f"{url}/#/queue/{queue}")
    wait_text(browser, "#timers", "No pending timers.")


def test_kv_page_browses_a_namespace_by_prefix_with_values_as_text(browser, url):
    ns = f"dash-{uuid.uuid4().hex[:8]}"
    hostile = "<img src=x onerror=\"document.title='owned'\">"
    ops = [{"op": "put", "ns": ns, "key": f"user:{i}", "value": {"n": i}, "forever": True}
           for i in range(3)]
    ops.append({"op": "put", "ns": ns, "key": "user:html", "value": hostile, "ttlSeconds": 600})
    ops.append({"op": "put", "ns": ns, "key": "other", "value": 1, "forever": True})
    status, body = call("POST", "/api/v1/kv", {"operations": ops})
    assert status == 200 and all(r["applied"] for r in body["results"]), body

    browser.get(f"{url}/#/kv")
    wait_text(browser, "main", "Name a namespace and a key prefix")
    browser.find_element(By.ID, "kv-ns").send_keys(ns)
    browser.find_element(By.ID, "kv-prefix").send_keys("user:")
    browser.find_element(By.CSS_SELECTOR, "#kv-form button[type=submit]").click()
    wait_text(browser, "h1", f"Key-value {ns}")
    wait_text(browser, "main", "user:html")
    keys = browser.execute_script(
        "return [...document.querySelectorAll('main tbody tr td:first-child')].map(td => td.textContent)")
    assert keys == ["user:0", "user:1", "user:2", "user:html"], keys
    cells = [c.text for c in row_of(browser, "user:1").find_elements(By.TAG_NAME, "td")]
    assert cells[2] == "never" and cells[4] == '{"n":1}', cells
    assert row_of(browser, "user:html").find_elements(By.TAG_NAME, "td")[4].text == json.dumps(hostile)
    assert not browser.find_elements(By.CSS_SELECTOR, "main img") and browser.title != "owned"
    shot(browser, "kv")

    browser.get(f"{url}/#/kv/NOT%20A%20NAMESPACE/x")
    wait_text(browser, "#kv-error", 'kv_bad_request: operation 0: ns "NOT A NAMESPACE" is not a namespace')
    assert browser.find_element(By.ID, "kv-ns").get_attribute("value") == "NOT A NAMESPACE"


def test_kv_page_tells_a_read_only_token_it_needs_read_write(browser, auth_url):
    browser.get(f"{auth_url}/#/kv/some-ns/a")
    browser.execute_script("sessionStorage.clear()")
    browser.refresh()
    field = WebDriverWait(browser, 15).until(EC.presence_of_element_located((By.ID, "token")))
    field.send_keys(mint("read-only"))
    browser.find_element(By.CSS_SELECTOR, "#token-form button[type=submit]").click()
    wait_text(browser, "main", "needs the read-write role")


def test_ephemeral_page_lists_queues_with_their_gauges(browser, url):
    queue = f"dash-eph-{uuid.uuid4().hex[:8]}"
    status, body = call("POST", "/api/v1/ephemeral/push",
                        {"queue": queue, "messages": [{"payload": {"i": i}} for i in range(3)]})
    assert status == 201, body
    browser.get(f"{url}/#/ephemeral")
    wait_text(browser, "main", queue)
    cells = [c.text for c in row_of(browser, queue).find_elements(By.TAG_NAME, "td")]
    assert cells[:3] == [queue, "no", "3"] and cells[7] == "0 / 0 / 0" and cells[8] == "reject", cells
    shot(browser, "ephemeral")
