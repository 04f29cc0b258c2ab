"""Fixtures: two real brokers (embedded PostgreSQL, started by run.sh): one with auth off (its URL
in QUEEN_URL), one with HS256 JWT auth on (QUEEN_AUTH_URL, secret QUEEN_AUTH_SECRET); and one
headless Chromium per session, driven through the Debian chromedriver."""

import base64
import hashlib
import hmac
import json
import os
import pathlib
import time
import urllib.error
import urllib.request

import pytest
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions as EC
from selenium.webdriver.support.ui import WebDriverWait

SHOTS = pathlib.Path(os.environ.get("DASHBOARD_SHOTS", "target/dashboard-screenshots"))


def call(method, path, body=None, base=None, token=None):
    """One JSON request to a broker (the auth-off one unless `base` is given), with `token` as
    bearer if given; returns (status, parsed body or None), refusals included."""
    data = None if body is None else json.dumps(body).encode()
    headers = {"content-type": "application/json"}
    if token:
        headers["authorization"] = f"Bearer {token}"
    req = urllib.request.Request((base or os.environ["QUEEN_URL"]) + path, data=data,
                                 method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            raw = resp.read()
            return resp.status, (json.loads(raw) if raw else None)
    except urllib.error.HTTPError as e:
        raw = e.read()
        return e.code, (json.loads(raw) if raw else None)


def _b64(raw):
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def mint(role, sub="dashboard-test"):
    """An HS256 JWT for the auth broker with `role`, valid for ten minutes."""
    now = int(time.time())
    header = _b64(json.dumps({"alg": "HS256", "typ": "JWT"}).encode())
    claims = _b64(json.dumps({"sub": sub, "role": role, "iat": now, "exp": now + 600}).encode())
    signed = f"{header}.{claims}".encode()
    key = os.environ["QUEEN_AUTH_SECRET"].encode()
    return f"{header}.{claims}.{_b64(hmac.new(key, signed, hashlib.sha256).digest())}"


@pytest.fixture(scope="session")
def url():
    return os.environ["QUEEN_URL"]


@pytest.fixture(scope="session")
def auth_url():
    return os.environ["QUEEN_AUTH_URL"]


@pytest.fixture(scope="session")
def browser():
    opts = webdriver.ChromeOptions()
    opts.binary_location = os.environ.get("CHROMIUM", "/usr/bin/chromium")
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic",
                 "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--window-size=1280,900"):
        opts.add_argument(flag)
    service = Service(os.environ.get("CHROMEDRIVER", "/usr/bin/chromedriver"))
    driver = webdriver.Chrome(service=service, options=opts)
    SHOTS.mkdir(parents=True, exist_ok=True)
    yield driver
    driver.quit()


def shot(browser, name):
    browser.save_screenshot(str(SHOTS / f"{name}.png"))


def wait_text(browser, css, text, timeout=15):
    WebDriverWait(browser, timeout).until(EC.text_to_be_present_in_element((By.CSS_SELECTOR, css), text))


def row_of(browser, text):
    rows = browser.find_elements(By.CSS_SELECTOR, "tbody tr")
    return next(r for r in rows if text in r.text)


def push(queue, n, base=None, token=None):
    items = [{"queue": queue, "partition": "Default", "payload": {"n": i}} for i in range(n)]
    status, body = call("POST", "/api/v1/push", {"items": items}, base, token)
    assert status == 201 and all(r["status"] == "queued" for r in body), body
