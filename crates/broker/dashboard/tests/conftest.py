"""Fixtures: one real broker (embedded PostgreSQL, started by run.sh; its URL in QUEEN_URL) and
one headless Chromium per session, driven through the Debian chromedriver."""

import json
import os
import pathlib
import urllib.request

import pytest
from selenium import webdriver
from selenium.webdriver.chrome.service import Service

SHOTS = pathlib.Path(os.environ.get("DASHBOARD_SHOTS", "target/dashboard-screenshots"))


def call(method, path, body=None):
    """One JSON request to the broker; returns (status, parsed body or None)."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(os.environ["QUEEN_URL"] + path, data=data, method=method,
                                 headers={"content-type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as resp:
        raw = resp.read()
        return resp.status, (json.loads(raw) if raw else None)


@pytest.fixture(scope="session")
def url():
    return os.environ["QUEEN_URL"]


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
