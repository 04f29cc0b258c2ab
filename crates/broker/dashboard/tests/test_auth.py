"""The dashboard against a broker with JWT auth on: the page asks for a token (and again, with
the broker's reason, when one is refused), then shows what the token may read; a token whose
role is too weak sees the role an action needs; an admin flips both maintenance flags from the
system page, checked through the API."""

import uuid

from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from conftest import call, mint, push, row_of, shot, wait_text


def enter_token(browser, token):
    field = browser.find_element(By.ID, "token")
    field.clear()
    field.send_keys(token)
    browser.find_element(By.CSS_SELECTOR, "#token-form button[type=submit]").click()


def test_the_page_asks_for_a_token_then_shows_a_queue_with_its_depth(browser, auth_url):
    queue = f"dash-auth-{uuid.uuid4().hex[:8]}"
    push(queue, 4, auth_url, mint("read-write"))
    browser.get(auth_url + "/")
    wait_text(browser, "#auth-error", "missing bearer token")
    shot(browser, "token-entry")

    enter_token(browser, "not-a-jwt")
    wait_text(browser, "#auth-error", "malformed")

    enter_token(browser, mint("read-only"))
    wait_text(browser, "main", queue)
    cells = [c.text for c in row_of(browser, queue).find_elements(By.TAG_NAME, "td")]
    assert cells[:4] == [queue, "1", "4", "4"], cells
    shot(browser, "overview-auth")


def test_maintenance_toggles_need_admin_and_flip_both_flags(browser, auth_url):
    admin = mint("admin")
    browser.get(auth_url + "/#/system")
    # Still signed in as read-only from the test above, or asked for a token on a fresh tab.
    WebDriverWait(browser, 15).until(lambda b: b.find_elements(By.ID, "token") or b.find_elements(
        By.CSS_SELECTOR, "button[data-action=maintenance-pop]"))
    if browser.find_elements(By.ID, "token"):
        enter_token(browser, mint("read-only"))
    wait_text(browser, "button[data-action=maintenance-pop]", "turn on")
    browser.find_element(By.CSS_SELECTOR, "button[data-action=maintenance-pop]").click()
    wait_text(browser, "#status", "needs the admin role; the token's role is read-only")
    assert call("GET", "/api/v1/system/maintenance/pop", base=auth_url, token=admin)[1][
        "popMaintenanceMode"] is False

    browser.find_element(By.ID, "signout").click()
    wait_text(browser, "#auth-error", "missing bearer token")
    enter_token(browser, admin)
    try:
        for action, flag in (("maintenance-pop", "popMaintenanceMode"),
                             ("maintenance-push", "maintenanceMode")):
            button = f"button[data-action={action}]"
            wait_text(browser, button, "turn on")
            browser.find_element(By.CSS_SELECTOR, button).click()
            wait_text(browser, button, "turn off")
            status, mode = call("GET", "/api/v1/system/maintenance", base=auth_url, token=admin)
            assert status == 200 and mode[flag] is True, mode
        shot(browser, "system-maintenance")
        for action, flag in (("maintenance-pop", "popMaintenanceMode"),
                             ("maintenance-push", "maintenanceMode")):
            browser.find_element(By.CSS_SELECTOR, f"button[data-action={action}]").click()
            wait_text(browser, f"button[data-action={action}]", "turn on")
            status, mode = call("GET", "/api/v1/system/maintenance", base=auth_url, token=admin)
            assert status == 200 and mode[flag] is False, mode
    finally:
        for path in ("/api/v1/system/maintenance", "/api/v1/system/maintenance/pop"):
            call("POST", path, {"enabled": False}, auth_url, admin)
