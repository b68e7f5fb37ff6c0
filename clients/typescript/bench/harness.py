"""What the browser benchmarks (run.py, queries.py) share: waiting for `deltasnap serve` to say
its port, a headless Chromium on one of its pages, and calling the page's async functions."""
import os
import re
import shutil
import time

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.support.ui import WebDriverWait


def served_url(log_path, hint=""):
    """The http://127.0.0.1:PORT `deltasnap serve` printed into `log_path` (within 15 s)."""
    for _ in range(150):
        match = re.search(r"http://127\.0\.0\.1:(\d+)", open(log_path).read())
        if match:
            return f"http://127.0.0.1:{int(match.group(1))}"
        time.sleep(0.1)
    raise SystemExit(f"deltasnap serve did not start{hint}:\n" + open(log_path).read()[-2000:])


def open_page(tmp, url, script_timeout):
    """A headless Chromium (its profile under `tmp`) on `url`, once the page set data-ready."""
    options = webdriver.ChromeOptions()
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu", f"--user-data-dir={os.path.join(tmp, 'profile')}"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(shutil.which("chromedriver") or "/usr/bin/chromedriver"), options=options)
    driver.set_script_timeout(script_timeout)
    driver.get(url)
    WebDriverWait(driver, 30).until(lambda d: d.execute_script("return document.body.dataset.ready") == "1")
    return driver


def caller(driver):
    """call(expression): awaits the page's promise `expression` and returns its value (raises its error)."""
    def call(expression):
        result = driver.execute_async_script("const done = arguments[0]; " + expression + ".then((v) => done({ ok: v }), (e) => done({ error: String(e && e.stack || e) }));")
        if "error" in result:
            raise RuntimeError(result["error"])
        return result["ok"]
    return call


def stop(driver, server, tmp):
    """Quits Chromium, stops the server by its PID and removes the scratch directory."""
    if driver:
        driver.quit()
    if server:
        server.terminate()
        server.wait(timeout=10)
    shutil.rmtree(tmp, ignore_errors=True)
