"""The dashboard in a real browser against a real broker: what the test pushes shows up, with
its depth, on the overview and queue pages; dead letters are listed and open their message;
a dead letter replayed from the DLQ page is poppable again; a seek from the queue page moves the
group; the queue page lists many partitions one page at a time; the system page reports the
database and its maintenance flags."""

import uuid

from selenium.webdriver.common.by import By

from conftest import call, push, row_of, shot, wait_text


def test_overview_shows_a_pushed_queue_with_its_depth(browser, url):
    queue = f"dash-{uuid.uuid4().hex[:8]}"
    push(queue, 3)
    browser.get(url + "/")
    wait_text(browser, "main", queue)
    row = row_of(browser, queue)
    cells = [c.text for c in row.find_elements(By.TAG_NAME, "td")]
    assert cells[:4] == [queue, "1", "3", "3"], cells
    shot(browser, "overview")

    row.find_element(By.TAG_NAME, "a").click()
    wait_text(browser, "h1", f"Queue {queue}")
    wait_text(browser, "[data-stat=pending] b", "3")
    shot(browser, "queue")


def test_dlq_page_lists_a_dead_letter_and_opens_its_message(browser, url):
    queue = f"dash-dlq-{uuid.uuid4().hex[:8]}"
    push(queue, 2)
    _, popped = call("GET", f"/api/v1/pop/queue/{queue}?batch=1")
    msg = popped["messages"][0]
    ack = {"transactionId": msg["transactionId"], "partitionId": msg["partitionId"],
           "leaseId": msg["leaseId"], "status": "dlq", "error": "broken on purpose"}
    _, answer = call("POST", "/api/v1/ack/batch", {"acknowledgments": [ack]})
    assert answer[0]["success"], answer

    browser.get(f"{url}/#/dlq/{queue}")
    wait_text(browser, "main", msg["transactionId"])
    row = row_of(browser, msg["transactionId"])
    assert "broken on purpose" in row.text
    shot(browser, "dlq")

    row.find_element(By.CSS_SELECTOR, "a").click()
    wait_text(browser, "h1", msg["transactionId"])
    wait_text(browser, "main", "dead_letter")
    shot(browser, "message")


def test_dlq_page_replays_a_dead_letter_and_it_is_poppable_again(browser, url):
    queue = f"dash-replay-{uuid.uuid4().hex[:8]}"
    push(queue, 1)
    _, popped = call("GET", f"/api/v1/pop/queue/{queue}?batch=1")
    msg = popped["messages"][0]
    ack = {"transactionId": msg["transactionId"], "partitionId": msg["partitionId"],
           "leaseId": msg["leaseId"], "status": "dlq"}
    _, answer = call("POST", "/api/v1/ack/batch", {"acknowledgments": [ack]})
    assert answer[0]["dlq"], answer
    status, _ = call("GET", f"/api/v1/pop/queue/{queue}?batch=1")
    assert status == 204, "nothing left to pop before the replay"

    browser.get(f"{url}/#/dlq/{queue}")
    wait_text(browser, "main", msg["transactionId"])
    row = row_of(browser, msg["transactionId"])
    row.find_element(By.CSS_SELECTOR, "button[data-action=replay]").click()
    wait_text(browser, "#status", "pushed back at offset 1")
    wait_text(browser, "main", "page 1 of 1 (0)")
    shot(browser, "dlq-replayed")

    status, again = call("GET", f"/api/v1/pop/queue/{queue}?batch=1")
    assert status == 200, again
    replayed = again["messages"][0]
    assert replayed["transactionId"] == msg["transactionId"]
    assert replayed["data"] == msg["data"]
    assert replayed["id"] != msg["id"]
    _, left = call("GET", f"/api/v1/dlq?queue={queue}")
    assert left["total"] == 0, left


def test_seek_from_the_queue_page_moves_a_group_to_the_end(browser, url):
    queue = f"dash-seek-{uuid.uuid4().hex[:8]}"
    push(queue, 4)
    status, _ = call("GET", f"/api/v1/pop/queue/{queue}?batch=1&consumerGroup=g&autoAck=true")
    assert status == 200
    browser.get(f"{url}/#/queue/{queue}")
    wait_text(browser, "main", "Consumer groups")
    wait_text(browser, "tbody", "g")
    browser.find_element(By.CSS_SELECTOR, "form.inline button[type=submit]").click()
    wait_text(browser, "#status", "partitions moved")
    group = call("GET", f"/api/v1/resources/queues/{queue}")[1]["consumerGroups"]
    assert [g["pending"] for g in group if g["name"] == "g"] == [0], group


def test_system_page_reports_the_database(browser, url):
    browser.get(f"{url}/#/system")
    wait_text(browser, "main", "connected")
    wait_text(browser, "main", "takes writes")
    _, health = call("GET", "/health")
    wait_text(browser, "main", health["server"]["systemIdentifier"])
    wait_text(browser, "button[data-action=maintenance-pop]", "turn on")
    wait_text(browser, "#health", "healthy")
    shot(browser, "system")


def test_queue_page_lists_partitions_one_page_at_a_time(browser, url):
    queue = f"dash-wide-{uuid.uuid4().hex[:8]}"
    items = [{"queue": queue, "partition": f"p{i:03}", "payload": {"i": i}} for i in range(120)]
    status, body = call("POST", "/api/v1/push", {"items": items})
    assert status == 201, body
    browser.get(f"{url}/#/queue/{queue}")
    wait_text(browser, "main", "page 1 of 3 (120)")
    # Read in one script, so a refresh cannot swap the rows under the reading.
    names = lambda: browser.execute_script(
        "return [...document.querySelectorAll('h2 + .pager + table tbody tr td:first-child')]"
        ".map(td => td.textContent)")
    assert names() == [f"p{i:03}" for i in range(50)]
    browser.find_element(By.CSS_SELECTOR, "button[data-action=next]").click()
    wait_text(browser, "main", "page 2 of 3 (120)")
    assert names() == [f"p{i:03}" for i in range(50, 100)]
    browser.find_element(By.CSS_SELECTOR, "button[data-action=next]").click()
    wait_text(browser, "main", "page 3 of 3 (120)")
    assert names() == [f"p{i:03}" for i in range(100, 120)]
    assert browser.find_element(By.CSS_SELECTOR, "button[data-action=next]").get_attribute("disabled")
    browser.find_element(By.CSS_SELECTOR, "button[data-action=prev]").click()
    wait_text(browser, "main", "page 2 of 3 (120)")
    assert names()[0] == "p050"
    shot(browser, "queue-pages")
