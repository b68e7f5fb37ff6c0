#!/usr/bin/env python3
"""The operator's console (`deltasnap serve --console`) in headless Chromium, driven by Selenium,
against a live server on loopback: sign in with the admin token, find one partition among
100,000 by its key, open a reviewed collection's change, approve it through the page and see
the audit line; a screenshot of the diff view lands in ARTIFACTS/console-diff.png.

Run by .ci/browser-tests.sh (BIN, ARTIFACTS and the venv come from there).
"""
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
import unittest
import urllib.request

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select, WebDriverWait

BIN = os.path.abspath(os.environ.get("BIN", ".build/debug/deltasnap"))
ARTIFACTS = os.path.abspath(os.environ.get("ARTIFACTS", ".build/browser-artifacts"))
ADMIN = "console-admin-token"
SECRET = "console-jwt-secret"
PARTITIONS = int(os.environ.get("CONSOLE_PARTITIONS", "100000"))
WAIT = 30


def http(method, url, body=None, headers=None):
    req = urllib.request.Request(url, data=body, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


class Console(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="deltasnap-console-")
        db = os.path.join(cls.tmp, "store.sqlite")
        rules = os.path.join(cls.tmp, "rules.yaml")
        with open(rules, "w") as f:
            f.write("collections:\n"
                    "  catalogue: { read: public, review: { editors: editor, reviewers: reviewer } }\n"
                    "  shelves: { partitioned: true, read: public, write: admin }\n"
                    "  lists: { partitioned: true, read: public, review: { editors: editor, reviewers: reviewer } }\n")
        run = lambda *args, **kw: subprocess.run([BIN, *args], check=True, capture_output=True, text=True, **kw)
        run("import", "--db", db, "--collection", "catalogue", "--quiet", "-",
            input="".join(json.dumps({"id": f"item{i}", "price": i}) + "\n" for i in range(10)))
        lines = "".join(json.dumps({"id": "b1", "shelf": f"s{i:06d}"}) + "\n" for i in range(PARTITIONS))
        run("import", "--db", db, "--collection", "shelves", "--partition-by", "shelf", "--quiet", "-", input=lines)
        out = os.path.join(cls.tmp, "serve.out")
        with open(out, "w") as f:
            cls.server = subprocess.Popen([BIN, "serve", "--db", db, "--port", "0", "--write-token", ADMIN, "--jwt-secret", SECRET,
                                           "--rules", rules, "--console", "--log-level", "warning"], stdout=f, stderr=subprocess.STDOUT)
        port = None
        for _ in range(300):
            match = re.search(r"http://127\.0\.0\.1:(\d+)", open(out).read())
            if match:
                port = int(match.group(1))
                break
            time.sleep(0.1)
        if port is None:
            cls.tearDownClass()
            raise RuntimeError("deltasnap serve did not start: " + open(out).read()[-2000:])
        cls.url = f"http://127.0.0.1:{port}"
        try:
            cls.prepare(run)
        except BaseException:
            cls.tearDownClass()  # the server started: stop it whatever failed after
            raise

    @classmethod
    def prepare(cls, run):
        # An editor's change waits in the workspace: one price changed, one item added.
        editor = run("token", "--secret", SECRET, "--subject", "ed", "--role", "editor").stdout.strip()
        batch = json.dumps({"client": "ed-laptop", "mutations": [
            {"seq": 1, "op": "patch", "id": "item3", "value": {"price": 30}},
            {"seq": 2, "op": "insert", "id": "item99", "value": {"price": 99}}]}).encode()
        status, text = http("POST", f"{cls.url}/v1/collections/catalogue/mutations", batch, {"Authorization": f"Bearer {editor}"})
        assert status == 200, (status, text)
        # And a partition of a reviewed partitioned collection, its review requested: the queue
        # shows it without the page reading millions of partitions.
        auth = {"Authorization": f"Bearer {editor}", "Content-Type": "application/json"}
        batch = json.dumps({"client": "ed-phone", "mutations": [{"seq": 1, "op": "insert", "id": "x1", "value": {"title": "milk"}}]}).encode()
        status, text = http("POST", f"{cls.url}/v1/collections/lists/partitions/l1/mutations", batch, auth)
        assert status == 200, (status, text)
        status, text = http("POST", f"{cls.url}/v1/collections/lists/partitions/l1/review/request", b'{"comment":"first list"}', auth)
        assert status == 200, (status, text)
        options = webdriver.ChromeOptions()
        for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu", "--window-size=1400,900",
                    f"--user-data-dir={os.path.join(cls.tmp, 'profile')}"):
            options.add_argument(arg)
        options.binary_location = shutil.which("chromium") or "/usr/bin/chromium"
        cls.driver = webdriver.Chrome(service=Service(shutil.which("chromedriver") or "/usr/bin/chromedriver"), options=options)

    @classmethod
    def tearDownClass(cls):
        try:
            if getattr(cls, "driver", None):
                cls.driver.quit()
        finally:
            if cls.server.poll() is None:
                cls.server.send_signal(signal.SIGTERM)
                try:
                    cls.server.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    cls.server.kill()
            shutil.rmtree(cls.tmp, ignore_errors=True)

    def find(self, css, text=None):
        def found(driver):
            try:
                for element in driver.find_elements(By.CSS_SELECTOR, css):
                    if element.is_displayed() and (text is None or text.lower() in element.text.lower()):
                        return element
            except StaleElementReferenceException:
                pass  # re-rendered meanwhile (the search runs as one types): look again
            return None
        try:
            return WebDriverWait(self.driver, WAIT).until(found)
        except Exception:
            banner = self.driver.execute_script("const e = document.getElementById('error'); return e && !e.hidden ? e.textContent : null;")
            raise AssertionError(f"{css} {text or ''} did not show; the page's error: {banner}; its log: {self.driver.get_log('browser')}")

    def test_sign_in_find_a_partition_and_approve_a_review(self):
        d = self.driver
        d.get(f"{self.url}/console/")
        policy = urllib.request.urlopen(f"{self.url}/console/").headers["Content-Security-Policy"]
        self.assertIn("script-src 'self'", policy)
        self.assertEqual(http("GET", f"{self.url}/v1/console/overview")[0], 401, "the console's data needs the admin token")
        self.find("#token").send_keys(ADMIN)
        self.find("#signin-button").click()
        self.find("#health", "reachable")
        self.assertNotIn(ADMIN, d.current_url, "the token is never in a URL")
        self.find("#waiting", "lists/l1: requested by ed")

        # One partition among PARTITIONS, by its key.
        self.find("nav button[data-tab=collections]").click()
        # The tab shows before its lists arrive: wait for the option, not only for the select.
        self.find("#partitioned")
        WebDriverWait(d, WAIT).until(lambda driver: driver.execute_script(
            "return [...document.querySelectorAll('#partitioned option')].some((o) => o.value === 'shelves');"))
        Select(self.find("#partitioned")).select_by_value("shelves")  # "lists" is partitioned too
        key = f"s{PARTITIONS * 42 // 100:06d}"
        self.find("#partition-search").send_keys(key)
        self.find("#partition-list tr.clickable", f"shelves/{key}")
        time.sleep(0.5)  # the last keystroke's search has landed
        texts = d.execute_script("return [...document.querySelectorAll('#partition-list tr.clickable')].map((r) => r.textContent);")
        self.assertTrue(texts and all(key in t for t in texts), texts)
        self.find("#partition-list tr.clickable", f"shelves/{key}").click()
        self.find("#collection-view", f"shelves/{key}")
        self.find("#records", "b1")
        self.find("#versions", "1 (")
        self.find("#head span.size", " B")  # its bytes, counted by the server
        collections = self.find("#collection-list").text
        self.assertIn("catalogue", collections)
        self.find("#collection-list span.size", "B")
        os.makedirs(ARTIFACTS, exist_ok=True)
        d.save_screenshot(os.path.join(ARTIFACTS, "console-collections.png"))

        # The queue: a partition's request, declined through the page.
        self.find("nav button[data-tab=reviews]").click()
        self.find("#waiting-list tr.clickable", "lists/l1").click()
        self.find("#diff", "x1")
        self.find("#review-state", "Requested by ed")
        self.find("#review-comment").send_keys("not yet")
        self.find("button", "Decline").click()
        self.find("#review-log", "decline by admin")
        self.find("#review-queue .card", "none")  # nothing waits any more
        self.assertNotIn("lists/l1", self.find("#review-queue").text)

        # The review: side by side, approved through the page.
        self.find("#review-list tr.clickable", "catalogue").click()
        self.find("#diff", "item99")
        diff = self.find("#diff").text
        self.assertIn("item3", diff)
        self.assertIn("30", diff)
        self.find("button", "Request review").click()
        self.find("#review-state", "Requested by admin")
        os.makedirs(ARTIFACTS, exist_ok=True)
        d.save_screenshot(os.path.join(ARTIFACTS, "console-diff.png"))
        self.find("#review-comment").send_keys("spring prices")
        self.find("button", "Approve").click()
        self.find("#review-log", "approve by admin")
        self.assertIn("spring prices", self.find("#review-log").text)
        status, body = http("GET", f"{self.url}/v1/collections/catalogue")
        self.assertEqual(status, 200)
        self.assertIn('{"id":"item99","price":99}', body)
        self.assertIn('{"id":"item3","price":30}', body)


if __name__ == "__main__":
    unittest.main(verbosity=2)
